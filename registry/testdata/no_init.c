/* no_init.c: a test plugin that exports no init function. */
int tilerun_not_an_init = 1;
