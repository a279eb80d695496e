/* pipeline.c: pipeline files, and the pipeline: each component inline (a direct call), in a
 * thread (an actor on inproc://) or in a process (a client of `tilerun serve`). */
#include "components/pipeline/pipeline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zmq.h>

#include "components/pipeline/stages.h"
#include "components/pipeline/transport.h"
#include "manifest/yaml_doc.h"
#include "platform/platform.h"
#include "proto/wire.h"

static const char *const kNames[TR_COMPONENT_COUNT] = {"validate", "settle", "select", "build", "launch"};

const char *tr_component_name(tr_component_id id) {
  return (int)id >= 0 && id < TR_COMPONENT_COUNT ? kNames[id] : NULL;
}

int tr_component_id_of(const char *name) {
  for (int i = 0; i < TR_COMPONENT_COUNT; i++) {
    if (strcmp(kNames[i], name) == 0) return i;
  }
  return -1;
}

void tr_pipeline_config_default(tr_pipeline_config *out) {
  memset(out, 0, sizeof(*out));
  out->deadline_ms = 3000;
}

static tr_status *load_component(tr_yaml_doc *doc, yaml_node_t *node, tr_component_config *c, const char *name) {
  if (node->type != YAML_MAPPING_NODE) return tr_yaml_error_at(doc, node, "component '%s': a mapping is expected", name);
  char prefix[64];
  snprintf(prefix, sizeof(prefix), "component '%s': ", name);
  TR_RETURN_IF_ERROR(tr_yaml_unique_keys(doc, node, prefix, ""));
  for (yaml_node_pair_t *p = node->data.mapping.pairs.start; p < node->data.mapping.pairs.top; p++) {
    yaml_node_t *k = tr_yaml_node(doc, p->key), *v = tr_yaml_node(doc, p->value);
    const char *key = tr_yaml_scalar(k), *value = tr_yaml_scalar(v);
    if (key == NULL || value == NULL) return tr_yaml_error_at(doc, k, "component '%s': keys and values are strings", name);
    if (strcmp(key, "placement") == 0) {
      if (strcmp(value, "inline") == 0) c->placement = TR_PLACE_INLINE;
      else if (strcmp(value, "thread") == 0) c->placement = TR_PLACE_THREAD;
      else if (strcmp(value, "process") == 0) c->placement = TR_PLACE_PROCESS;
      else return tr_yaml_error_at(doc, v, "component '%s': placement '%s' is not inline, thread or process", name, value);
    } else if (strcmp(key, "endpoint") == 0) {
      if (strncmp(value, "ipc://", 6) != 0 && strncmp(value, "tcp://", 6) != 0) {
        return tr_yaml_error_at(doc, v, "component '%s': endpoint '%s' is not ipc:// or tcp://", name, value);
      }
      if (strlen(value) >= sizeof(c->endpoint)) return tr_yaml_error_at(doc, v, "component '%s': endpoint too long", name);
      strcpy(c->endpoint, value);
    } else if (strcmp(key, "implementation") == 0) {
      if (strcmp(value, "builtin") == 0) c->implementation = TR_IMPL_BUILTIN;
      else if (strcmp(value, "trace") == 0) c->implementation = TR_IMPL_TRACE;
      else if (strcmp(value, "pinned") == 0 && strcmp(name, "select") == 0) c->implementation = TR_IMPL_PINNED;
      else {
        return tr_yaml_error_at(doc, v, "component '%s': implementation '%s' is not known here (known: builtin, "
                                "trace%s)", name, value, strcmp(name, "select") == 0 ? ", pinned" : "");
      }
    } else if (strcmp(key, "path") == 0 || strcmp(key, "pins") == 0) {
      if (strlen(value) >= sizeof(c->option_path)) return tr_yaml_error_at(doc, v, "component '%s': %s too long", name, key);
      strcpy(c->option_path, value);
    } else if (strcmp(key, "curve_server_key") == 0) {
      if (strlen(value) != 40) return tr_yaml_error_at(doc, v, "component '%s': curve_server_key must be 40 Z85 characters", name);
      strcpy(c->curve_server_key, value);
    } else if (strcmp(key, "curve_client_secret_file") == 0) {
      if (strlen(value) >= sizeof(c->curve_client_secret_file)) {
        return tr_yaml_error_at(doc, v, "component '%s': curve_client_secret_file too long", name);
      }
      strcpy(c->curve_client_secret_file, value);
    } else {
      return tr_yaml_error_at(doc, k, "component '%s': unknown key '%s' (known: implementation, placement, "
                              "endpoint, curve_server_key, curve_client_secret_file, path, pins)", name, key);
    }
  }
  if (c->curve_client_secret_file[0] != '\0' && c->curve_server_key[0] == '\0') {
    return tr_yaml_error_at(doc, node, "component '%s': curve_client_secret_file needs curve_server_key", name);
  }
  if (c->implementation != TR_IMPL_BUILTIN && c->option_path[0] == '\0') {
    return tr_yaml_error_at(doc, node, "component '%s': implementation %s needs %s", name,
                            c->implementation == TR_IMPL_TRACE ? "trace" : "pinned",
                            c->implementation == TR_IMPL_TRACE ? "a path (the trace file)" : "pins (the pins file)");
  }
  if (c->placement == TR_PLACE_PROCESS && c->endpoint[0] == '\0') {
    return tr_yaml_error_at(doc, node, "component '%s': placement process needs an endpoint", name);
  }
  return NULL;
}

tr_status *tr_pipeline_config_load(const char *path, tr_pipeline_config *out) {
  tr_pipeline_config_default(out);
  tr_yaml_doc *doc = NULL;
  TR_RETURN_IF_ERROR(tr_yaml_load_file(path, &doc));
  tr_status *status = tr_yaml_one_document(doc, "a pipeline file");
  yaml_node_t *root = tr_yaml_root(doc);
  if (status == NULL && (root == NULL || root->type != YAML_MAPPING_NODE)) {
    status = tr_yaml_error_at(doc, root, "a pipeline file is a mapping with 'components' (and 'deadline_ms')");
  }
  if (status == NULL) status = tr_yaml_unique_keys(doc, root, "", " in a pipeline file");
  for (yaml_node_pair_t *p = status ? NULL : root->data.mapping.pairs.start; status == NULL && p < root->data.mapping.pairs.top; p++) {
    yaml_node_t *k = tr_yaml_node(doc, p->key), *v = tr_yaml_node(doc, p->value);
    const char *key = tr_yaml_scalar(k);
    if (key != NULL && strcmp(key, "deadline_ms") == 0) {
      const char *text = tr_yaml_scalar(v);
      char *end = NULL;
      long ms = text ? strtol(text, &end, 10) : 0;
      if (text == NULL || *end != '\0' || ms <= 0 || ms > 3600000) {
        status = tr_yaml_error_at(doc, v, "deadline_ms must be a number of milliseconds from 1 to 3600000, got '%s'", text ? text : "?");
      }
      out->deadline_ms = (uint32_t)ms;
    } else if (key != NULL && strcmp(key, "components") == 0 && v->type != YAML_MAPPING_NODE) {
      status = tr_yaml_error_at(doc, v, "'components' must be a mapping of component: {placement, ...}");
    } else if (key != NULL && strcmp(key, "components") == 0) {
      status = tr_yaml_unique_keys(doc, v, "", " in 'components'");
      for (yaml_node_pair_t *c = v->data.mapping.pairs.start; status == NULL && c < v->data.mapping.pairs.top; c++) {
        yaml_node_t *ck = tr_yaml_node(doc, c->key);
        const char *name = tr_yaml_scalar(ck);
        int id = name ? tr_component_id_of(name) : -1;
        if (id < 0) {
          status = tr_yaml_error_at(doc, ck, "unknown component '%s' (components: validate, settle, select, build, launch)", name ? name : "?");
        } else {
          status = load_component(doc, tr_yaml_node(doc, c->value), &out->components[id], name);
        }
      }
    } else {
      status = tr_yaml_error_at(doc, k, "unknown key '%s' in a pipeline file (known: components, deadline_ms)", key ? key : "?");
    }
  }
  tr_yaml_doc_destroy(&doc);
  return status;
}

typedef struct channel {
  const char *name;
  tr_trace *trace;   /* implementation trace */
  tr_pins *pins;     /* implementation pinned */
  tr_placement placement;
  tr_component_handler handler;
  void *ctx;
  tr_server *server; /* thread */
  tr_client *client; /* thread, process */
} channel;

struct tr_pipeline {
  channel channels[TR_COMPONENT_COUNT];
};

/* A call through the channel's placement (the trace stage wraps this). */
static tr_status *channel_call(void *ctx, const uint8_t *request, size_t request_size, uint8_t *reply,
                               size_t reply_cap, size_t *reply_size) {
  channel *ch = ctx;
  if (ch->placement == TR_PLACE_INLINE) {
    if (ch->handler == NULL) return TR_STATUS(TR_TRANSPORT, "component '%s' has no implementation here", ch->name);
    return ch->handler(ch->ctx, request, request_size, reply, reply_cap, reply_size);
  }
  if (ch->client == NULL) return TR_STATUS(TR_TRANSPORT, "component '%s' has no implementation here", ch->name);
  return tr_client_call(ch->client, request, request_size, reply, reply_cap, reply_size);
}

/* A client's Curve keypair: the secret from the first line of `path`, the public key derived. */
static tr_status *client_keypair(const char *name, const char *path, char public_key[TR_CURVE_KEY_SIZE],
                                 char secret_key[TR_CURVE_KEY_SIZE]) {
  public_key[0] = secret_key[0] = '\0';
  char *text = NULL;
  size_t size = 0;
  tr_status *status = tr_plat_read_file(path, &text, &size);
  if (status != NULL) {
    tr_status *named = TR_STATUS(tr_status_code(status), "component '%s': curve_client_secret_file: %s", name,
                                 tr_status_message(status));
    tr_status_destroy(&status);
    return named;
  }
  size_t len = tr_curve_key_line(text, size, secret_key);
  if (secret_key[0] == '\0') {
    status = TR_STATUS(TR_VALUE, "component '%s': curve_client_secret_file '%s' must hold a 40-character Z85 "
                       "secret key, got %zu characters", name, path, len);
  } else {
    if (zmq_curve_public(public_key, secret_key) != 0) {
      status = TR_STATUS(TR_VALUE, "component '%s': curve_client_secret_file '%s' holds no key libzmq accepts: %s",
                         name, path, zmq_strerror(zmq_errno()));
    }
  }
  memset(text, 0, size);
  free(text);
  return status;
}

tr_status *tr_pipeline_new(const tr_pipeline_config *config, const tr_component_handler *handlers,
                           void *const *contexts, tr_pipeline **out) {
  *out = NULL;
  tr_pipeline *p = calloc(1, sizeof(*p));
  if (p == NULL) return TR_STATUS(TR_OUT_OF_MEMORY, "a pipeline");
  tr_status *status = NULL;
  for (int i = 0; i < TR_COMPONENT_COUNT && status == NULL; i++) {
    channel *ch = &p->channels[i];
    const tr_component_config *c = &config->components[i];
    ch->name = kNames[i];
    ch->placement = c->placement;
    ch->handler = handlers[i];
    ch->ctx = contexts[i];
    if (c->implementation == TR_IMPL_PINNED) {
      status = tr_pins_load(c->option_path, &ch->pins);
      if (status != NULL) { /* say which component's pins these were */
        status = tr_status_append(status, " (the pins file of component '%s')", kNames[i]);
      }
      ch->handler = tr_pinned_select_handle;
      ch->ctx = ch->pins;
    } else if (c->implementation == TR_IMPL_TRACE) { /* on the caller's side of any placement */
      status = tr_trace_new(c->option_path, kNames[i], channel_call, ch, &ch->trace);
      if (status != NULL) status = tr_status_append(status, " (the trace file of component '%s')", kNames[i]);
    }
    if (status != NULL) break;
    tr_transport_options opts;
    memset(&opts, 0, sizeof(opts));
    opts.component = kNames[i];
    opts.deadline_ms = config->deadline_ms;
    if (c->placement == TR_PLACE_THREAD) {
      if (ch->handler == NULL) continue;
      char endpoint[96];
      snprintf(endpoint, sizeof(endpoint), "inproc://tilerun-%s-%p", kNames[i], (void *)p);
      status = tr_server_start(endpoint, ch->handler, ch->ctx, &opts, &ch->server);
      if (status == NULL) status = tr_client_new(endpoint, &opts, &ch->client);
    } else if (c->placement == TR_PLACE_PROCESS) {
      char client_public[TR_CURVE_KEY_SIZE], client_secret[TR_CURVE_KEY_SIZE];
      if (c->curve_server_key[0]) opts.curve_server_public = c->curve_server_key;
      if (c->curve_client_secret_file[0]) {
        status = client_keypair(kNames[i], c->curve_client_secret_file, client_public, client_secret);
        opts.curve_client_public = client_public;
        opts.curve_client_secret = client_secret;
      }
      if (status == NULL) status = tr_client_new(c->endpoint, &opts, &ch->client);
      memset(client_secret, 0, sizeof(client_secret));
    }
  }
  if (status != NULL) {
    tr_pipeline_destroy(&p);
    return status;
  }
  *out = p;
  return NULL;
}

void tr_pipeline_destroy(tr_pipeline **pipeline_p) {
  if (pipeline_p == NULL || *pipeline_p == NULL) return;
  tr_pipeline *p = *pipeline_p;
  *pipeline_p = NULL;
  for (int i = 0; i < TR_COMPONENT_COUNT; i++) {
    tr_client_destroy(&p->channels[i].client);
    tr_server_stop(&p->channels[i].server);
    tr_trace_destroy(&p->channels[i].trace);
    tr_pins_destroy(&p->channels[i].pins);
  }
  free(p);
}

tr_status *tr_pipeline_call(tr_pipeline *p, tr_component_id id, const uint8_t *request,
                            size_t request_size, uint8_t *reply, size_t reply_cap, size_t *reply_size) {
  channel *ch = &p->channels[id];
  if (ch->trace != NULL) return tr_trace_handle(ch->trace, request, request_size, reply, reply_cap, reply_size);
  return channel_call(ch, request, request_size, reply, reply_cap, reply_size);
}

tr_placement tr_pipeline_placement(const tr_pipeline *p, tr_component_id id) { return p->channels[id].placement; }

const char *tr_pipeline_endpoint(const tr_pipeline *p, tr_component_id id) {
  const channel *ch = &p->channels[id];
  return ch->placement == TR_PLACE_PROCESS && ch->client != NULL ? tr_client_endpoint(ch->client) : NULL;
}

int tr_pipeline_inline_handler(const tr_pipeline *p, tr_component_id id, tr_component_handler *handler, void **ctx) {
  const channel *ch = &p->channels[id];
  int plain = ch->placement == TR_PLACE_INLINE && ch->trace == NULL && ch->pins == NULL && ch->handler != NULL;
  *handler = plain ? ch->handler : NULL;
  *ctx = plain ? ch->ctx : NULL;
  return plain;
}

void tr_pipeline_call_each(tr_pipeline *p, tr_pipeline_exchange *x, size_t n, int until_failure) {
  enum { MAX_SENT = TR_COMPONENT_COUNT };
  tr_client_pending sent[MAX_SENT];
  size_t sent_of[MAX_SENT], n_sent = 0; /* the indices of the requests sent, increasing */
  for (size_t i = 0; i < n; i++) {
    x[i].reply_size = 0;
    x[i].status = NULL;
    x[i].made = 0;
  }
  for (size_t i = 0; i < n; i++) { /* requests to other threads and processes: sent now */
    channel *ch = &p->channels[x[i].id];
    if (ch->trace != NULL || ch->placement == TR_PLACE_INLINE || ch->client == NULL || n_sent == MAX_SENT) continue;
    x[i].status = tr_client_send(ch->client, x[i].request, x[i].request_size, &sent[n_sent]);
    if (x[i].status == NULL) {
      sent_of[n_sent++] = i;
      continue;
    }
    x[i].made = 1; /* made, and failed */
    if (until_failure) break;
  }
  size_t k = 0; /* the next sent request to receive */
  for (size_t i = 0; i < n; i++) { /* in order: the others called, the replies taken */
    tr_pipeline_exchange *e = &x[i];
    if (k < n_sent && sent_of[k] == i) {
      e->status = tr_client_receive(&sent[k++], e->reply, e->reply_cap, &e->reply_size);
      e->made = 1;
    } else if (!e->made) {
      e->status = tr_pipeline_call(p, e->id, e->request, e->request_size, e->reply, e->reply_cap, &e->reply_size);
      e->made = 1;
    }
    if (until_failure && e->status != NULL) break;
  }
  while (k < n_sent) tr_client_abandon(&sent[k++]); /* after a failure: no wait for their replies */
}

tr_status *tr_pipeline_as_replied(tr_status *status) {
  if (status == NULL) return NULL;
  tilerun_Status msg;
  tr_wire_status_from(status, &msg);
  tr_status_destroy(&status);
  return tr_wire_status_to(&msg);
}
