/* op_cache.c: op instances kept by (op, params, target) for calls by name. */
#include "runtime/op_cache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "platform/platform.h"
#include "runtime/internal.h"

enum { CACHE_MAX = 128, KEY_MAX = 4096 };

typedef struct cached {
  char *key;
  tr_op *op;
  uint64_t used;
} cached;

struct tr_op_cache {
  tr_runtime *rt;
  tr_plat_mutex lock;
  cached items[CACHE_MAX];
  size_t n;
  uint64_t tick;
};

tr_status *tr_op_cache_new(tr_runtime *runtime, tr_op_cache **out) {
  *out = NULL;
  TR_RETURN_IF_ERROR(tr__runtime_discover(runtime));
  tr_op_cache *c = calloc(1, sizeof(*c));
  if (c == NULL) return TR_STATUS(TR_OUT_OF_MEMORY, "an op cache");
  tr_status *status = tr_plat_mutex_init(&c->lock);
  if (status != NULL) {
    free(c);
    return status;
  }
  c->rt = runtime;
  *out = c;
  return NULL;
}

static void drop(tr_op_cache *c, size_t i) {
  tr_op_destroy(&c->items[i].op);
  free(c->items[i].key);
  c->items[i] = c->items[--c->n];
}

void tr_op_cache_destroy(tr_op_cache **cache_p) {
  if (cache_p == NULL || *cache_p == NULL) return;
  tr_op_cache *c = *cache_p;
  *cache_p = NULL;
  while (c->n > 0) drop(c, c->n - 1);
  tr_plat_mutex_destroy(&c->lock);
  free(c);
}

const tr_registry *tr_op_cache_registry(const tr_op_cache *cache) { return cache->rt->registry; }

/* "LEN:op\nLEN:target\nLEN:name=LEN:value..." with each string's length in front, so that no two
 * sets of params write the same key; params are settled (every one, in declaration order). */
static tr_status *key_of(const char *op, const tr_named_value *params, size_t n, const char *target, char *key) {
  size_t used = (size_t)snprintf(key, KEY_MAX, "%zu:%s\n%zu:%s\n", strlen(op), op, strlen(target), target);
  char value[KEY_MAX]; /* a value may take the whole key: the key's own bound decides */
  for (size_t i = 0; i < n && used < KEY_MAX; i++) {
    size_t len = tr_value_format(&params[i].value, value, sizeof(value));
    if (len >= sizeof(value)) return TR_STATUS(TR_VALUE, "%s: param '%s' takes more than %zu bytes written out", op,
                                               params[i].name, sizeof(value) - 1);
    used += (size_t)snprintf(key + used, KEY_MAX - used, "%zu:%s=%zu:%s", strlen(params[i].name), params[i].name,
                             len, value);
  }
  if (used >= KEY_MAX) return TR_STATUS(TR_VALUE, "%s: its params take more than %d bytes written out", op, KEY_MAX);
  return NULL;
}

/* The op kept for (op, params, target), made (`make`) when there is none; NULL *out: none kept
 * and not made. */
static tr_status *op_for(tr_op_cache *c, const char *op, const tr_named_value *params, size_t n, const char *target,
                         int make, tr_op **out) {
  *out = NULL;
  char *key = malloc(KEY_MAX);
  if (key == NULL) return TR_STATUS(TR_OUT_OF_MEMORY, "an op cache key");
  tr_status *status = key_of(op, params, n, target, key);
  for (size_t i = 0; status == NULL && i < c->n; i++) {
    if (strcmp(c->items[i].key, key) == 0) {
      c->items[i].used = ++c->tick;
      *out = c->items[i].op;
      free(key);
      return NULL;
    }
  }
  tr_op *made = NULL;
  if (status == NULL && !make) {
    free(key);
    return NULL;
  }
  if (status == NULL) status = tr_op_new(c->rt, op, params, n, target[0] ? target : NULL, &made);
  if (status != NULL) {
    free(key);
    return status;
  }
  if (c->n == CACHE_MAX) {
    size_t oldest = 0;
    for (size_t i = 1; i < c->n; i++) {
      if (c->items[i].used < c->items[oldest].used) oldest = i;
    }
    drop(c, oldest);
  }
  c->items[c->n++] = (cached){key, made, ++c->tick};
  *out = made;
  return NULL;
}

static tr_status *cache_call(void *cache, const tr_launch_descriptor *d, DLTensor *const *inputs, size_t n_inputs,
                             DLTensor *const *outputs, size_t n_outputs) {
  tr_op_cache *c = cache;
  tr_plat_mutex_lock(&c->lock);
  tr_op *o = NULL;
  tr_status *status = op_for(c, d->op, d->params, d->n_params, d->target, 1, &o);
  if (status == NULL && d->tuned && !tr__op_in_tuned_mode(o)) status = tr_op_request_tune(o);
  if (status == NULL) {
    status = tr_op_call_into(o, (const DLTensor *const *)inputs, n_inputs, outputs, n_outputs);
  }
  tr_plat_mutex_unlock(&c->lock);
  return status;
}

static tr_status *cache_tune(void *cache, const tr_launch_descriptor *d) {
  tr_op_cache *c = cache;
  tr_plat_mutex_lock(&c->lock);
  tr_op *o = NULL;
  tr_status *status = op_for(c, d->op, d->params, d->n_params, d->target, 1, &o);
  if (status == NULL) status = tr_op_request_tune(o);
  tr_plat_mutex_unlock(&c->lock);
  return status;
}

static tr_status *cache_config(void *cache, const tr_launch_descriptor *d, tr_launch_config *out) {
  tr_op_cache *c = cache;
  tr_plat_mutex_lock(&c->lock);
  tr_op *o = NULL;
  tr_status *status = op_for(c, d->op, d->params, d->n_params, d->target, 0, &o);
  if (status == NULL && o == NULL) tr_launch_config_clear(out); /* none kept: no kernel, no config */
  if (status == NULL && o != NULL) {
    const tr_named_value *values = NULL;
    size_t n = tr_op_kernel_config(o, &values);
    status = tr_launch_config_set(out, values, n);
  }
  tr_plat_mutex_unlock(&c->lock);
  return status;
}

const tr_launch_ops tr_op_cache_ops = {cache_call, cache_tune, cache_config};
