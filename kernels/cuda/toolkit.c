/* toolkit.c: the CUDA Toolkit libraries' places, tried in order. */
#include "kernels/cuda/toolkit.h"

#include <stdio.h>
#include <string.h>

void tr_cuda_lib_places_of(const char *stem, int unversioned, tr_cuda_lib_places *out) {
  out->n = 0;
  snprintf(out->at[out->n++], sizeof(out->at[0]), "%s.so.13", stem);
  snprintf(out->at[out->n++], sizeof(out->at[0]), "%s.so.12", stem);
  if (unversioned) snprintf(out->at[out->n++], sizeof(out->at[0]), "%s.so", stem);
  const char *cuda = tr_plat_getenv("TILERUN_CUDA_PATH");
  if (cuda != NULL && cuda[0] != '\0' && strcmp(cuda, "none") != 0) {
    snprintf(out->at[out->n++], sizeof(out->at[0]), "%s/lib64/%s.so.13", cuda, stem);
  }
  snprintf(out->at[out->n++], sizeof(out->at[0]), "/usr/local/cuda/lib64/%s.so.13", stem);
}

tr_plat_lib *tr_cuda_lib_open_first(const char *stem, int unversioned, int (*bind)(tr_plat_lib *lib),
                                    void (*note)(const char *text)) {
  tr_cuda_lib_places places;
  tr_cuda_lib_places_of(stem, unversioned, &places);
  for (size_t i = 0; i < places.n; i++) {
    tr_plat_lib *lib = NULL;
    tr_status *failed = tr_plat_lib_open(places.at[i], &lib);
    if (failed != NULL) {
      note(tr_status_message(failed));
      tr_status_destroy(&failed);
      continue;
    }
    if (bind(lib)) return lib;
    tr_plat_lib_close(&lib);
  }
  return NULL;
}
