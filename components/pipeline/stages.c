/* stages.c: the trace stage and the pinned selector, the two shipped custom implementations. */
#include "components/pipeline/stages.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "manifest/yaml_doc.h"
#include "platform/platform.h"
#include "proto/codec.h"
#include "proto/wire.h"

/* ---- trace ---- */

struct tr_trace {
  FILE *file;
  char component[32];
  tr_component_handler inner;
  void *inner_ctx;
  tr_plat_mutex lock;
};

tr_status *tr_trace_new(const char *path, const char *component, tr_component_handler inner,
                        void *inner_ctx, tr_trace **out) {
  *out = NULL;
  tr_trace *t = calloc(1, sizeof(*t));
  if (t == NULL) return TR_STATUS(TR_OUT_OF_MEMORY, "a trace stage");
  t->file = fopen(path, "a");
  if (t->file == NULL) {
    free(t);
    return TR_STATUS(TR_IO, "trace: cannot open '%s' to append", path);
  }
  setvbuf(t->file, NULL, _IONBF, 0); /* one write per line */
  snprintf(t->component, sizeof(t->component), "%s", component);
  t->inner = inner;
  t->inner_ctx = inner_ctx;
  tr_status *status = tr_plat_mutex_init(&t->lock);
  if (status != NULL) {
    fclose(t->file);
    free(t);
    return status;
  }
  *out = t;
  return NULL;
}

void tr_trace_destroy(tr_trace **trace_p) {
  if (trace_p == NULL || *trace_p == NULL) return;
  tr_trace *t = *trace_p;
  *trace_p = NULL;
  fclose(t->file);
  tr_plat_mutex_destroy(&t->lock);
  free(t);
}

/* Every request names its op in field 2 (a string): read it from the raw bytes. */
static void op_of(const uint8_t *msg, size_t size, char *op, size_t cap) {
  op[0] = '\0';
  size_t at = 0;
  while (at < size) {
    uint64_t key = 0;
    int shift = 0;
    while (at < size && shift < 64) {
      key |= (uint64_t)(msg[at] & 0x7f) << shift;
      shift += 7;
      if (!(msg[at++] & 0x80)) break;
    }
    uint32_t wire = key & 7;
    uint64_t len = 0;
    if (wire == 0) {
      while (at < size && (msg[at++] & 0x80)) {}
      continue;
    }
    if (wire != 2) return; /* fixed-size fields do not occur before the op */
    shift = 0;
    while (at < size && shift < 64) {
      len |= (uint64_t)(msg[at] & 0x7f) << shift;
      shift += 7;
      if (!(msg[at++] & 0x80)) break;
    }
    if (len > size - at) return;
    if ((key >> 3) == 2) {
      size_t n = len < cap - 1 ? (size_t)len : cap - 1;
      memcpy(op, msg + at, n); /* raw bytes: the line escapes them */
      op[n] = '\0';
      return;
    }
    at += (size_t)len;
  }
}

/* The length of the valid UTF-8 sequence at text[0..n) (1 to 4), or 0 when it is not one. */
static size_t utf8_length(const unsigned char *t, size_t n) {
  size_t len = t[0] < 0x80 ? 1 : (t[0] & 0xe0) == 0xc0 ? 2 : (t[0] & 0xf0) == 0xe0 ? 3 : (t[0] & 0xf8) == 0xf0 ? 4 : 0;
  if (len == 0 || len > n) return 0;
  for (size_t i = 1; i < len; i++) {
    if ((t[i] & 0xc0) != 0x80) return 0;
  }
  uint32_t cp = len == 1 ? t[0] : len == 2 ? (t[0] & 0x1fu) : len == 3 ? (t[0] & 0x0fu) : (t[0] & 0x07u);
  for (size_t i = 1; i < len; i++) cp = (cp << 6) | (t[i] & 0x3fu);
  static const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < least[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0; /* overlong, surrogate */
  return len;
}

/* Appends `text` (n bytes) to buf as the inside of a JSON string: \" \\ \n \r \t, other control
 * characters as \u00XX, valid UTF-8 as it is, any other byte as U+FFFD. Stops short of size. */
static void json_text(char *buf, size_t size, size_t *used, const char *text, size_t n) {
  const unsigned char *t = (const unsigned char *)text;
  for (size_t i = 0; i < n;) {
    char esc[8];
    const char *piece = esc;
    size_t len = 0, step = 1;
    unsigned char c = t[i];
    if (c == '"' || c == '\\') {
      esc[0] = '\\', esc[1] = (char)c, len = 2;
    } else if (c == '\n' || c == '\r' || c == '\t') {
      esc[0] = '\\', esc[1] = c == '\n' ? 'n' : c == '\r' ? 'r' : 't', len = 2;
    } else if (c < 0x20 || c == 0x7f) {
      len = (size_t)snprintf(esc, sizeof(esc), "\\u%04x", c);
    } else if ((step = utf8_length(t + i, n - i)) != 0) {
      piece = text + i, len = step;
    } else {
      piece = "\\ufffd", len = 6, step = 1;
    }
    if (*used + len + 1 >= size) break;
    memcpy(buf + *used, piece, len);
    *used += len;
    i += step;
  }
  buf[*used] = '\0';
}

static void hex(char *buf, size_t size, size_t *used, const uint8_t *bytes, size_t n) {
  static const char digits[] = "0123456789abcdef";
  for (size_t i = 0; i < n && *used + 2 < size; i++) {
    buf[(*used)++] = digits[bytes[i] >> 4];
    buf[(*used)++] = digits[bytes[i] & 15];
  }
  buf[*used] = '\0';
}

tr_status *tr_trace_handle(void *ctx, const uint8_t *request, size_t request_size, uint8_t *reply,
                           size_t reply_cap, size_t *reply_size) {
  tr_trace *t = ctx;
  uint64_t start = tr_plat_now_ns();
  tr_status *status = t->inner(t->inner_ctx, request, request_size, reply, reply_cap, reply_size);
  double us = (double)(tr_plat_now_ns() - start) / 1e3;
  char op[72];
  op_of(request, request_size, op, sizeof(op));
  /* The line is made whole, then written with one unbuffered append, so stages sharing a file
   * (or threads sharing a stage) never interleave their lines. */
  const char *message = status ? tr_status_message(status) : "";
  size_t size = 2 * (request_size + (status ? 0 : *reply_size)) + 6 * (strlen(message) + sizeof(op)) + 4096, used = 0;
  char *line = malloc(size);
  if (line != NULL) {
    used += (size_t)snprintf(line, size, "{\"op\": \"");
    json_text(line, size, &used, op, strlen(op));
    used += (size_t)snprintf(line + used, size - used, "\", \"component\": \"");
    json_text(line, size, &used, t->component, strlen(t->component));
    used += (size_t)snprintf(line + used, size - used, "\", \"request\": \"");
    hex(line, size, &used, request, request_size);
    used += (size_t)snprintf(line + used, size - used, "\", \"reply\": \"");
    if (status == NULL) hex(line, size, &used, reply, *reply_size);
    used += (size_t)snprintf(line + used, size - used, "\", \"microseconds\": %.1f", us);
    if (status != NULL) {
      used += (size_t)snprintf(line + used, size - used, ", \"error\": \"");
      json_text(line, size, &used, message, strlen(message));
      line[used++] = '"';
    }
    used += (size_t)snprintf(line + used, size - used, "}\n");
    tr_plat_mutex_lock(&t->lock);
    fwrite(line, 1, used, t->file);
    tr_plat_mutex_unlock(&t->lock);
    free(line);
  }
  return status;
}

/* ---- pinned select ---- */

typedef struct pin {
  char op[64], interface[64], key[64];
  size_t n_match;
  tr_named_value match[16];
  char names[16][64];
} pin;

struct tr_pins {
  size_t count;
  pin *items;
};

void tr_pins_destroy(tr_pins **pins_p) {
  if (pins_p == NULL || *pins_p == NULL) return;
  tr_pins *pins = *pins_p;
  *pins_p = NULL;
  for (size_t i = 0; i < pins->count; i++) {
    for (size_t m = 0; m < pins->items[i].n_match; m++) tr_value_clear(&pins->items[i].match[m].value);
  }
  free(pins->items);
  free(pins);
}

/* A YAML scalar as a value: an int, a float, true/false, else a string. */
static tr_status *scalar_value(const char *text, tr_value *out) {
  char *end = NULL;
  long long i = strtoll(text, &end, 10);
  if (*text && *end == '\0') { *out = tr_value_int(i); return NULL; }
  double f = strtod(text, &end);
  if (*text && *end == '\0') { *out = tr_value_float(f); return NULL; }
  if (strcmp(text, "true") == 0 || strcmp(text, "false") == 0) { *out = tr_value_bool(text[0] == 't'); return NULL; }
  return tr_value_str(text, out);
}

static tr_status *load_pin(tr_yaml_doc *doc, yaml_node_t *node, pin *p) {
  if (node->type != YAML_MAPPING_NODE) return tr_yaml_error_at(doc, node, "a pin is a mapping {op, interface, match, key}");
  for (yaml_node_pair_t *kv = node->data.mapping.pairs.start; kv < node->data.mapping.pairs.top; kv++) {
    yaml_node_t *k = tr_yaml_node(doc, kv->key), *v = tr_yaml_node(doc, kv->value);
    const char *key = tr_yaml_scalar(k);
    char *slot = key == NULL ? NULL : strcmp(key, "op") == 0 ? p->op : strcmp(key, "interface") == 0 ? p->interface
                                     : strcmp(key, "key") == 0 ? p->key : NULL;
    if (slot != NULL) {
      const char *text = tr_yaml_scalar(v);
      if (text == NULL || strlen(text) >= 64) return tr_yaml_error_at(doc, v, "pin '%s' must be a string of at most 63 characters", key);
      strcpy(slot, text);
    } else if (key != NULL && strcmp(key, "match") == 0 && v->type == YAML_MAPPING_NODE) {
      for (yaml_node_pair_t *m = v->data.mapping.pairs.start; m < v->data.mapping.pairs.top; m++) {
        const char *field = tr_yaml_scalar(tr_yaml_node(doc, m->key)), *value = tr_yaml_scalar(tr_yaml_node(doc, m->value));
        if (field == NULL || value == NULL || strlen(field) >= 64 || p->n_match == 16) {
          return tr_yaml_error_at(doc, tr_yaml_node(doc, m->key), "a match is field: value (at most 16)");
        }
        strcpy(p->names[p->n_match], field);
        p->match[p->n_match].name = p->names[p->n_match];
        TR_RETURN_IF_ERROR(scalar_value(value, &p->match[p->n_match].value));
        p->n_match++;
      }
    } else {
      return tr_yaml_error_at(doc, k, "unknown key '%s' in a pin (known: op, interface, match, key)", key ? key : "?");
    }
  }
  if (!p->op[0] || !p->interface[0] || !p->key[0]) return tr_yaml_error_at(doc, node, "a pin needs op, interface and key");
  return NULL;
}

tr_status *tr_pins_load(const char *path, tr_pins **out) {
  *out = NULL;
  tr_yaml_doc *doc = NULL;
  TR_RETURN_IF_ERROR(tr_yaml_load_file(path, &doc));
  tr_pins *pins = calloc(1, sizeof(*pins));
  tr_status *status = pins ? tr_yaml_one_document(doc, "a pins file") : TR_STATUS(TR_OUT_OF_MEMORY, "pins");
  yaml_node_t *root = tr_yaml_root(doc);
  if (status == NULL && (root == NULL || root->type != YAML_SEQUENCE_NODE)) {
    status = tr_yaml_error_at(doc, root, "a pins file is a list of pins");
  }
  if (status == NULL) {
    size_t n = (size_t)(root->data.sequence.items.top - root->data.sequence.items.start);
    pins->items = calloc(n + 1, sizeof(pin));
    if (pins->items == NULL) status = TR_STATUS(TR_OUT_OF_MEMORY, "pins");
    for (size_t i = 0; status == NULL && i < n; i++) {
      status = load_pin(doc, tr_yaml_node(doc, root->data.sequence.items.start[i]), &pins->items[i]);
      pins->count = i + 1;
    }
  }
  tr_yaml_doc_destroy(&doc);
  if (status != NULL) {
    tr_pins_destroy(&pins);
    return status;
  }
  *out = pins;
  return NULL;
}

static int pin_matches(const pin *p, const tilerun_SelectRequest *rq) {
  if (strcmp(p->op, rq->op) != 0 || strcmp(p->interface, rq->interface) != 0) return 0;
  for (size_t m = 0; m < p->n_match; m++) {
    int found = 0;
    for (size_t f = 0; f < rq->fields_count && !found; f++) {
      if (strcmp(rq->fields[f].name, p->match[m].name) != 0) continue;
      tr_value v;
      tr_status *bad = tr_codec_value_from(&rq->fields[f].value, &v);
      if (bad != NULL) {
        tr_status_destroy(&bad);
        return 0;
      }
      found = tr_value_equal(&v, &p->match[m].value);
      tr_value_clear(&v);
    }
    if (!found) return 0;
  }
  return 1;
}

tr_status *tr_pinned_select_handle(void *ctx, const uint8_t *request, size_t request_size,
                                   uint8_t *reply, size_t reply_cap, size_t *reply_size) {
  const tr_pins *pins = ctx;
  tilerun_SelectRequest *rq = calloc(1, sizeof(*rq));
  tilerun_SelectReply rp = tilerun_SelectReply_init_zero;
  tr_status *status = rq ? NULL : TR_STATUS(TR_OUT_OF_MEMORY, "pinned select: a request");
  if (status == NULL) status = tr_codec_decode(tilerun_SelectRequest_fields, request, request_size, rq, "a SelectRequest");
  if (status == NULL) {
    tr_status *answer = NULL;
    size_t i = 0;
    while (i < pins->count && !pin_matches(&pins->items[i], rq)) i++;
    if (i < pins->count) {
      snprintf(rp.key, sizeof(rp.key), "%s", pins->items[i].key);
    } else {
      answer = TR_STATUS(TR_SELECTION, "pinned select: no pin covers %s %s on %s (%u call-spec fields); "
                         "the pinned selector refuses calls its file does not cover", rq->op,
                         rq->interface, rq->device, (unsigned)rq->fields_count);
    }
    tr_wire_reply_envelope(&rq->envelope, "select", answer, &rp.envelope);
    rp.has_envelope = true;
    tr_status_destroy(&answer);
    status = tr_codec_encode(tilerun_SelectReply_fields, &rp, reply, reply_cap, reply_size, "a SelectReply");
  }
  free(rq);
  return status;
}
