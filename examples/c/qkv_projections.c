/* Q/K/V projections, an attention head, RoPE and multi-head attention for `qkv check
 * --command`, in C99 with the C library and libm only.
 *
 *     cc -std=c99 -O2 -Wall -Wextra -pedantic -o qkv_projections qkv_projections.c -lm
 *     qkv check --command ./qkv_projections
 *
 * Three parts: a small JSON reader and writer (numbers exact: strtod reads correctly
 * rounded, format_number writes the shortest "%.*g" that reads back), the layer
 * (QkvProjections: forward and backward on row-major [batch, tokens, width] tensors),
 * and the protocol loop of docs/protocol.md, which dispatches on "op" through OPERATIONS.
 * No setlocale call on purpose: in the default "C" locale the decimal point is '.'.
 */
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ERROR_SIZE 256
#define MAX_RANK 8   /* qkv sends rank 2 and 3; more is answered with an error */
#define MAX_DEPTH 64 /* qkv's messages nest three deep; this only stops a runaway stack */

static void *checked(void *memory) {
    if (memory == NULL) {
        fputs("qkv_projections: out of memory\n", stderr);
        exit(1);
    }
    return memory;
}

/* ---- JSON: a tree, a reader and a writer -------------------------------------------- */

typedef enum { JSON_NULL, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT } JsonKind;

typedef struct Json {
    JsonKind kind;
    double number;      /* JSON_NUMBER; JSON_BOOL: 0 or 1 */
    char *string;       /* JSON_STRING */
    size_t count;       /* JSON_ARRAY, JSON_OBJECT: how many items */
    struct Json *items; /* JSON_ARRAY, JSON_OBJECT */
    char **keys;        /* JSON_OBJECT: keys[i] names items[i] */
} Json;

typedef struct {
    const char *text;
    size_t at;
    char error[ERROR_SIZE];
} Reader;

static bool fail(Reader *r, const char *what) {
    snprintf(r->error, ERROR_SIZE, "%s at byte %lu", what, (unsigned long)r->at);
    return false;
}

static void skip_space(Reader *r) {
    while (r->text[r->at] == ' ' || r->text[r->at] == '\t' || r->text[r->at] == '\n' ||
           r->text[r->at] == '\r') {
        r->at++;
    }
}

static bool read_value(Reader *r, Json *out, int depth);

static size_t digits(Reader *r) {
    size_t start = r->at;
    while (r->text[r->at] >= '0' && r->text[r->at] <= '9') r->at++;
    return r->at - start;
}

/* JSON's grammar -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? first (strtod alone would
 * also take "inf", "0x1p3" or " 1"), then strtod on exactly that text. */
static bool read_number(Reader *r, Json *out) {
    size_t start = r->at, whole;
    bool leading_zero;
    char *end;
    if (r->text[r->at] == '-') r->at++;
    leading_zero = r->text[r->at] == '0';
    whole = digits(r);
    if (whole == 0 || (leading_zero && whole > 1)) {
        r->at = start;
        return fail(r, "not a JSON value");
    }
    if (r->text[r->at] == '.') {
        r->at++;
        if (digits(r) == 0) return fail(r, "digits expected after '.'");
    }
    if (r->text[r->at] == 'e' || r->text[r->at] == 'E') {
        r->at++;
        if (r->text[r->at] == '+' || r->text[r->at] == '-') r->at++;
        if (digits(r) == 0) return fail(r, "digits expected in the exponent");
    }
    out->kind = JSON_NUMBER;
    out->number = strtod(r->text + start, &end);
    if (end != r->text + r->at) return fail(r, "unreadable number");
    if (!isfinite(out->number)) return fail(r, "number too large for a double");
    return true;
}

static unsigned hex4(Reader *r, bool *ok) {
    unsigned code = 0;
    int i;
    for (i = 0; i < 4; i++) {
        char c = r->text[r->at];
        unsigned digit = c >= '0' && c <= '9' ? (unsigned)(c - '0')
                       : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
                       : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10) : 16u;
        if (digit == 16u) {
            *ok = fail(r, "bad \\u escape");
            return 0;
        }
        code = code * 16 + digit;
        r->at++;
    }
    return code;
}

static void put_utf8(char *out, size_t *length, unsigned code) {
    if (code < 0x80) {
        out[(*length)++] = (char)code;
    } else if (code < 0x800) {
        out[(*length)++] = (char)(0xC0 | (code >> 6));
        out[(*length)++] = (char)(0x80 | (code & 0x3F));
    } else if (code < 0x10000) {
        out[(*length)++] = (char)(0xE0 | (code >> 12));
        out[(*length)++] = (char)(0x80 | ((code >> 6) & 0x3F));
        out[(*length)++] = (char)(0x80 | (code & 0x3F));
    } else {
        out[(*length)++] = (char)(0xF0 | (code >> 18));
        out[(*length)++] = (char)(0x80 | ((code >> 12) & 0x3F));
        out[(*length)++] = (char)(0x80 | ((code >> 6) & 0x3F));
        out[(*length)++] = (char)(0x80 | (code & 0x3F));
    }
}

/* A string's contents, decoded, in fresh memory (the decoded text is never longer). */
static bool read_string(Reader *r, char **out) {
    size_t start, length = 0;
    char *text;
    bool ok = true;
    if (r->text[r->at] != '"') return fail(r, "expected '\"'");
    start = ++r->at;
    while (r->text[r->at] != '"') {
        if (r->text[r->at] == '\0') return fail(r, "unfinished string");
        if (r->text[r->at] == '\\' && r->text[r->at + 1] != '\0') r->at++;
        r->at++;
    }
    text = checked(malloc(r->at - start + 1));
    r->at = start;
    while (ok && r->text[r->at] != '"') {
        char c = r->text[r->at++];
        if ((unsigned char)c < 0x20) {
            ok = fail(r, "control character in a string");
        } else if (c != '\\') {
            text[length++] = c;
        } else {
            char escape = r->text[r->at++];
            unsigned code;
            switch (escape) {
            case '"': case '\\': case '/': text[length++] = escape; break;
            case 'b': text[length++] = '\b'; break;
            case 'f': text[length++] = '\f'; break;
            case 'n': text[length++] = '\n'; break;
            case 'r': text[length++] = '\r'; break;
            case 't': text[length++] = '\t'; break;
            case 'u':
                code = hex4(r, &ok);
                if (ok && code >= 0xD800 && code < 0xDC00 && r->text[r->at] == '\\' &&
                    r->text[r->at + 1] == 'u') {
                    unsigned low;
                    r->at += 2;
                    low = hex4(r, &ok);
                    code = 0x10000 + ((code - 0xD800) << 10) + ((low - 0xDC00) & 0x3FF);
                }
                if (ok) put_utf8(text, &length, code);
                break;
            default: ok = fail(r, "unknown escape");
            }
        }
    }
    text[length] = '\0';
    if (!ok) {
        free(text);
        return false;
    }
    r->at++; /* the closing quote */
    *out = text;
    return true;
}

static void json_free(Json *value);

/* The items of an array or object, up to `close`; objects read "key": before each item. */
static bool read_items(Reader *r, Json *out, char close, int depth) {
    size_t capacity = 0;
    bool object = close == '}';
    out->kind = object ? JSON_OBJECT : JSON_ARRAY;
    r->at++;
    skip_space(r);
    if (r->text[r->at] == close) {
        r->at++;
        return true;
    }
    for (;;) {
        if (out->count == capacity) {
            capacity = capacity ? 2 * capacity : 8;
            out->items = checked(realloc(out->items, capacity * sizeof *out->items));
            if (object) out->keys = checked(realloc(out->keys, capacity * sizeof *out->keys));
        }
        memset(&out->items[out->count], 0, sizeof *out->items);
        if (object) {
            skip_space(r);
            if (!read_string(r, &out->keys[out->count])) return false;
            skip_space(r);
            if (r->text[r->at] != ':') {
                free(out->keys[out->count]);
                return fail(r, "expected ':'");
            }
            r->at++;
        }
        out->count++; /* counted before reading, so json_free releases a half-read item */
        if (!read_value(r, &out->items[out->count - 1], depth + 1)) return false;
        skip_space(r);
        if (r->text[r->at] == close) {
            r->at++;
            return true;
        }
        if (r->text[r->at] != ',') return fail(r, object ? "expected ',' or '}'" : "expected ',' or ']'");
        r->at++;
    }
}

static bool read_literal(Reader *r, const char *word, Json *out, JsonKind kind, double number) {
    size_t length = strlen(word);
    if (strncmp(r->text + r->at, word, length) != 0) return fail(r, "unexpected character");
    r->at += length;
    out->kind = kind;
    out->number = number;
    return true;
}

static bool read_value(Reader *r, Json *out, int depth) {
    if (depth > MAX_DEPTH) return fail(r, "JSON nested too deeply");
    skip_space(r);
    switch (r->text[r->at]) {
    case '\0': return fail(r, "unexpected end of text");
    case '{': return read_items(r, out, '}', depth);
    case '[': return read_items(r, out, ']', depth);
    case '"': out->kind = JSON_STRING; return read_string(r, &out->string);
    case 't': return read_literal(r, "true", out, JSON_BOOL, 1);
    case 'f': return read_literal(r, "false", out, JSON_BOOL, 0);
    case 'n': return read_literal(r, "null", out, JSON_NULL, 0);
    default: return read_number(r, out);
    }
}

/* `text` as one JSON value into `out` (free it with json_free, also on failure). */
static bool json_parse(const char *text, Json *out, char *error) {
    Reader r;
    r.text = text;
    r.at = 0;
    r.error[0] = '\0';
    memset(out, 0, sizeof *out);
    if (read_value(&r, out, 0)) {
        skip_space(&r);
        if (r.text[r.at] == '\0') return true;
        fail(&r, "text after the JSON value");
    }
    memcpy(error, r.error, ERROR_SIZE);
    return false;
}

static void json_free(Json *value) {
    size_t i;
    for (i = 0; i < value->count; i++) {
        json_free(&value->items[i]);
        if (value->kind == JSON_OBJECT) free(value->keys[i]);
    }
    free(value->items);
    free(value->keys);
    free(value->string);
}

/* The member `key` of an object, or NULL. */
static const Json *json_get(const Json *object, const char *key) {
    size_t i;
    if (object == NULL || object->kind != JSON_OBJECT) return NULL;
    for (i = 0; i < object->count; i++) {
        if (strcmp(object->keys[i], key) == 0) return &object->items[i];
    }
    return NULL;
}

/* The shortest "%.*g" that strtod reads back to x: 17 significant digits always do, and
 * "%g" drops trailing zeros, so 0.1 is "0.1", not "0.10000000000000001". For a normal
 * double the search can start at 15 digits (DBL_DIG: every decimal of up to 15 digits
 * comes back from "%.15g"); subnormals hold fewer digits, so 5e-324 starts at 1.
 * Negative zero is "-0.0": qkv reads a bare "-0" as the integer 0.
 * x must be finite (the caller checks: JSON has no NaN or infinity). */
static void format_number(double x, char out[32]) {
    int precision;
    if (x == 0.0 && signbit(x)) {
        strcpy(out, "-0.0");
        return;
    }
    for (precision = fabs(x) < DBL_MIN ? 1 : DBL_DIG; precision < 17; precision++) {
        snprintf(out, 32, "%.*g", precision, x);
        if (strtod(out, NULL) == x) return;
    }
    snprintf(out, 32, "%.17g", x);
}

static void write_number(FILE *out, double x) {
    char text[32];
    format_number(x, text);
    fputs(text, out);
}

static void write_string(FILE *out, const char *s) {
    fputc('"', out);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(out, "\\%c", c);
        else if (c < 0x20) fprintf(out, "\\u%04x", c);
        else fputc(c, out);
    }
    fputc('"', out);
}

/* ---- tensors and the layer (no JSON here) ------------------------------------------- */

/* values row-major: element [b, t, j] of [B, T, D] is values[(b * T + t) * D + j]. */
typedef struct {
    size_t rank;
    size_t shape[MAX_RANK];
    size_t size;
    double *values;
} Tensor;

static Tensor tensor_new(size_t rank, const size_t *shape) {
    Tensor t;
    size_t i;
    memset(&t, 0, sizeof t);
    t.rank = rank;
    t.size = 1;
    for (i = 0; i < rank; i++) {
        t.shape[i] = shape[i];
        t.size *= shape[i];
    }
    t.values = checked(calloc(t.size ? t.size : 1, sizeof *t.values));
    return t;
}

static void tensor_free(Tensor *t) {
    free(t->values);
    t->values = NULL;
}

static bool tensor_finite(const Tensor *t) {
    size_t i;
    for (i = 0; i < t->size; i++) {
        if (!isfinite(t->values[i])) return false;
    }
    return true;
}

enum { QUERY, KEY, VALUE };
static const char *const BRANCHES[3] = {"query", "key", "value"};

static bool wrong_key_path = false; /* --wrong key-path-uses-query-weight */

typedef struct {
    const Tensor *weights[3]; /* query, key, value: each [d_model, d_head], borrowed */
    size_t d_model, d_head;
    bool key_path_uses_query_weight; /* WRONG on purpose, with --wrong; see main */
} QkvProjections;

/* The layer with these weights, or false and a message in `error`; first failing check
 * wins: a weight of rank other than 2, model widths (rows) or head widths (columns) that
 * differ. */
static bool qkv_new(QkvProjections *layer, const Tensor *weights[3], char *error) {
    int b;
    layer->key_path_uses_query_weight = wrong_key_path; /* false unless --wrong asks */
    for (b = 0; b < 3; b++) {
        layer->weights[b] = weights[b];
        if (weights[b]->rank != 2) {
            snprintf(error, ERROR_SIZE, "%s projection: linear weight must have rank two, got rank %lu",
                     BRANCHES[b], (unsigned long)weights[b]->rank);
            return false;
        }
    }
    if (weights[KEY]->shape[0] != weights[QUERY]->shape[0] ||
        weights[VALUE]->shape[0] != weights[QUERY]->shape[0]) {
        snprintf(error, ERROR_SIZE, "Q/K/V model widths must match, got query %lu, key %lu, value %lu",
                 (unsigned long)weights[QUERY]->shape[0], (unsigned long)weights[KEY]->shape[0],
                 (unsigned long)weights[VALUE]->shape[0]);
        return false;
    }
    if (weights[KEY]->shape[1] != weights[QUERY]->shape[1] ||
        weights[VALUE]->shape[1] != weights[QUERY]->shape[1]) {
        snprintf(error, ERROR_SIZE, "Q/K/V head widths must match, got query %lu, key %lu, value %lu",
                 (unsigned long)weights[QUERY]->shape[1], (unsigned long)weights[KEY]->shape[1],
                 (unsigned long)weights[VALUE]->shape[1]);
        return false;
    }
    layer->d_model = weights[QUERY]->shape[0];
    layer->d_head = weights[QUERY]->shape[1];
    return true;
}

/* A valid input: rank 3, last axis d_model. */
static bool check_input(const QkvProjections *layer, const Tensor *x, char *error) {
    if (x->rank != 3) {
        snprintf(error, ERROR_SIZE,
                 "Q/K/V input must have rank three [batch, tokens, model_width], got rank %lu",
                 (unsigned long)x->rank);
        return false;
    }
    if (x->shape[2] != layer->d_model) {
        snprintf(error, ERROR_SIZE, "Q/K/V input final width must equal model width %lu, got %lu",
                 (unsigned long)layer->d_model, (unsigned long)x->shape[2]);
        return false;
    }
    return true;
}

/* out[b] = X W_b for query, key, value, each [batch, tokens, d_head]. */
static bool qkv_forward(const QkvProjections *layer, const Tensor *x, Tensor out[3], char *error) {
    size_t rows, i, j, k, d_model = layer->d_model, d_head = layer->d_head;
    size_t shape[3];
    int b;
    if (!check_input(layer, x, error)) return false;
    rows = x->shape[0] * x->shape[1];
    shape[0] = x->shape[0];
    shape[1] = x->shape[1];
    shape[2] = d_head;
    for (b = 0; b < 3; b++) {
        const double *w = layer->weights[b]->values;
        out[b] = tensor_new(3, shape);
        /* [B*T, d_model] @ [d_model, d_head] -> [B*T, d_head] */
        for (i = 0; i < rows; i++) {
            for (j = 0; j < d_head; j++) {
                double total = 0.0;
                for (k = 0; k < d_model; k++) total += x->values[i * d_model + k] * w[k * d_head + j];
                out[b].values[i * d_head + j] = total;
            }
        }
    }
    return true;
}

/* out = {grad_input, grad_w_query, grad_w_key, grad_w_value} for upstream dQ, dK, dV. */
static bool qkv_backward(const QkvProjections *layer, const Tensor *x, const Tensor *upstream[3],
                         Tensor out[4], char *error) {
    size_t rows, i, j, k, d_model = layer->d_model, d_head = layer->d_head;
    size_t weight_shape[2];
    int b;
    if (!check_input(layer, x, error)) return false;
    for (b = 0; b < 3; b++) {
        const Tensor *g = upstream[b];
        if (g->rank != 3 || g->shape[0] != x->shape[0] || g->shape[1] != x->shape[1] ||
            g->shape[2] != d_head) {
            snprintf(error, ERROR_SIZE, "%s upstream gradient must have shape [%lu, %lu, %lu]",
                     BRANCHES[b], (unsigned long)x->shape[0], (unsigned long)x->shape[1],
                     (unsigned long)d_head);
            return false;
        }
    }
    rows = x->shape[0] * x->shape[1];
    weight_shape[0] = d_model;
    weight_shape[1] = d_head;
    out[0] = tensor_new(3, x->shape); /* zeros: the three paths add into it */
    for (b = 0; b < 3; b++) {
        const double *g = upstream[b]->values;
        const double *w = layer->weights[b]->values;
        double *grad_w;
        if (b == KEY && layer->key_path_uses_query_weight) w = layer->weights[QUERY]->values;
        /* dX += dY W^T: [B*T, d_head] @ [d_head, d_model] -> [B*T, d_model] */
        for (i = 0; i < rows; i++) {
            for (j = 0; j < d_model; j++) {
                double total = 0.0;
                for (k = 0; k < d_head; k++) total += g[i * d_head + k] * w[j * d_head + k];
                out[0].values[i * d_model + j] += total;
            }
        }
        /* dW = X^T dY: [d_model, B*T] @ [B*T, d_head] -> [d_model, d_head], branch-local */
        out[1 + b] = tensor_new(2, weight_shape);
        grad_w = out[1 + b].values;
        for (i = 0; i < d_model; i++) {
            for (j = 0; j < d_head; j++) {
                double total = 0.0;
                for (k = 0; k < rows; k++) total += x->values[k * d_model + i] * g[k * d_head + j];
                grad_w[i * d_head + j] = total;
            }
        }
    }
    return true;
}

/* ---- an attention head on the layer (chapter 27) ------------------------------------ */

static bool wrong_head_dk = false; /* --wrong head-dk-uses-ds */

/* One head: scores = Q K^T / sqrt(d_k) [B,T,T] (before the mask), weights = the softmax of
 * each row of the masked scores (row max subtracted, so large scores cannot overflow),
 * output = weights V [B,T,d_head]. out = {scores, weights, output}; qkv = {Q, K, V}. */
static bool head_run(const QkvProjections *layer, const Tensor *x, bool causal, Tensor out[3],
                     Tensor qkv[3], char *error) {
    size_t batch, tokens, d = layer->d_head, b, i, j, k, shape[3];
    double scale = sqrt((double)d);
    if (!qkv_forward(layer, x, qkv, error)) return false;
    batch = x->shape[0], tokens = x->shape[1];
    shape[0] = batch, shape[1] = tokens, shape[2] = tokens;
    out[0] = tensor_new(3, shape);
    out[1] = tensor_new(3, shape);
    shape[2] = d;
    out[2] = tensor_new(3, shape);
    for (b = 0; b < batch; b++) {
        const double *q = qkv[QUERY].values + b * tokens * d, *kk = qkv[KEY].values + b * tokens * d;
        const double *v = qkv[VALUE].values + b * tokens * d;
        double *s = out[0].values + b * tokens * tokens, *a = out[1].values + b * tokens * tokens;
        double *o = out[2].values + b * tokens * d;
        for (i = 0; i < tokens; i++) {
            size_t last = causal ? i : tokens - 1; /* causal: later key positions are masked */
            double max = -INFINITY, total = 0.0;
            for (j = 0; j < tokens; j++) {
                double dot = 0.0;
                for (k = 0; k < d; k++) dot += q[i * d + k] * kk[j * d + k];
                s[i * tokens + j] = dot / scale;
            }
            for (j = 0; j <= last; j++) max = fmax(max, s[i * tokens + j]);
            for (j = 0; j <= last; j++) total += a[i * tokens + j] = exp(s[i * tokens + j] - max);
            for (j = 0; j <= last; j++) a[i * tokens + j] /= total;
            for (k = 0; k < d; k++) {
                double mix = 0.0;
                for (j = 0; j < tokens; j++) mix += a[i * tokens + j] * v[j * d + k];
                o[i * d + k] = mix;
            }
        }
    }
    return true;
}

/* out = {grad_input, grad_w_query, grad_w_key, grad_w_value} for grad_output dO: dA = dO V^T,
 * dV = A^T dO, dZ = A * (dA - rowsum(dA * A)), dS = dZ / sqrt(d_k), dQ = dS K, dK = dS^T Q,
 * then the projections' backward. */
static bool head_backward(const QkvProjections *layer, const Tensor *x, bool causal,
                          const Tensor *grad_output, Tensor out[4], char *error) {
    Tensor fwd[3], qkv[3], grads[3];
    const Tensor *upstream[3];
    size_t batch, tokens, d = layer->d_head, b, i, j, k, n;
    double scale = sqrt((double)d);
    bool ok;
    if (!head_run(layer, x, causal, fwd, qkv, error)) return false;
    batch = x->shape[0], tokens = x->shape[1];
    if (grad_output->rank != 3 || grad_output->shape[0] != batch ||
        grad_output->shape[1] != tokens || grad_output->shape[2] != d) {
        snprintf(error, ERROR_SIZE, "grad_output must have shape [%lu, %lu, %lu]",
                 (unsigned long)batch, (unsigned long)tokens, (unsigned long)d);
        for (n = 0; n < 3; n++) tensor_free(&fwd[n]), tensor_free(&qkv[n]);
        return false;
    }
    for (n = 0; n < 3; n++) grads[n] = tensor_new(3, qkv[n].shape);
    for (b = 0; b < batch; b++) {
        size_t at = b * tokens * d, square = b * tokens * tokens;
        const double *a = fwd[1].values + square, *g = grad_output->values + at;
        size_t cells = tokens * tokens;
        double *ds = checked(calloc(cells != 0 ? cells : 1, sizeof *ds));
        for (i = 0; i < tokens; i++) {
            double row_sum = 0.0;
            for (j = 0; j < tokens; j++) {
                double da = 0.0;
                for (k = 0; k < d; k++) da += g[i * d + k] * qkv[VALUE].values[at + j * d + k];
                ds[i * tokens + j] = da; /* dA for now */
                row_sum += da * a[i * tokens + j];
            }
            for (j = 0; j < tokens; j++) {
                ds[i * tokens + j] = a[i * tokens + j] * (ds[i * tokens + j] - row_sum) / scale;
            }
        }
        for (i = 0; i < tokens; i++) {
            for (k = 0; k < d; k++) {
                double dq = 0.0, dk = 0.0, dv = 0.0;
                for (j = 0; j < tokens; j++) {
                    dq += ds[i * tokens + j] * qkv[KEY].values[at + j * d + k];   /* dS K */
                    /* dS^T Q (WRONG on purpose with --wrong head-dk-uses-ds: dS Q) */
                    dk += (wrong_head_dk ? ds[i * tokens + j] : ds[j * tokens + i]) *
                          qkv[QUERY].values[at + j * d + k];
                    dv += a[j * tokens + i] * g[j * d + k];                        /* A^T dO */
                }
                grads[QUERY].values[at + i * d + k] = dq;
                grads[KEY].values[at + i * d + k] = dk;
                grads[VALUE].values[at + i * d + k] = dv;
            }
        }
        free(ds);
    }
    upstream[0] = &grads[0], upstream[1] = &grads[1], upstream[2] = &grads[2];
    ok = qkv_backward(layer, x, upstream, out, error);
    for (n = 0; n < 3; n++) tensor_free(&fwd[n]), tensor_free(&qkv[n]), tensor_free(&grads[n]);
    return ok;
}

/* ---- RoPE (chapter 29) and multi-head attention (chapter 30) ------------------------ */

/* Turn the adjacent pairs (2i, 2i+1) of each of `rows` rows of `width` (`tokens` rows a
 * sequence, so row r is token r % tokens) by (offset + t) * base^(-2i/width), in place;
 * sign -1 turns back. */
static void rope_turn(double *values, size_t rows, size_t tokens, size_t width, double base,
                      double offset, double sign) {
    size_t row, i;
    if (tokens == 0) return;
    for (row = 0; row < rows; row++) {
        double position = offset + (double)(row % tokens);
        for (i = 0; i < width / 2; i++) {
            double angle = position * pow(base, -2.0 * (double)i / (double)width);
            double c = cos(angle), s = sign * sin(angle);
            double a = values[row * width + 2 * i], b = values[row * width + 2 * i + 1];
            values[row * width + 2 * i] = a * c - b * s;
            values[row * width + 2 * i + 1] = b * c + a * s;
        }
    }
}

/* What RoPE refuses: an odd or zero width, a base that is not positive, a negative or
 * fractional offset. */
static bool rope_check(size_t width, double base, double offset, char *error) {
    if (width == 0 || width % 2) {
        snprintf(error, ERROR_SIZE, "RoPE needs an even, non-zero width, got %lu", (unsigned long)width);
        return false;
    }
    if (!isfinite(base) || !(base > 0)) {
        snprintf(error, ERROR_SIZE, "RoPE needs a positive base");
        return false;
    }
    if (!(offset >= 0) || offset != floor(offset)) {
        snprintf(error, ERROR_SIZE, "RoPE needs an offset of 0 or more");
        return false;
    }
    return true;
}

typedef struct {
    const Tensor *w[4]; /* W_Q, W_K, W_V, W_O, each [width, width] */
    size_t heads, width, size;
    bool rope;
    double base, offset;
} MultiHead;

static bool mha_new(MultiHead *m, const Tensor *w[4], double heads, bool rope, double base,
                    double offset, char *error) {
    size_t n;
    m->width = w[0]->rank == 2 ? w[0]->shape[0] : 0;
    for (n = 0; n < 4; n++) {
        m->w[n] = w[n];
        if (w[n]->rank != 2 || w[n]->shape[0] != m->width || w[n]->shape[1] != m->width) {
            snprintf(error, ERROR_SIZE, "weights must all be [%lu, %lu]", (unsigned long)m->width,
                     (unsigned long)m->width);
            return false;
        }
    }
    if (!(heads >= 1) || heads != floor(heads) || heads > 1e9 || m->width % (size_t)heads) {
        snprintf(error, ERROR_SIZE, "the heads must divide d_model %lu", (unsigned long)m->width);
        return false;
    }
    m->heads = (size_t)heads;
    m->size = m->width / m->heads;
    m->rope = rope, m->base = base, m->offset = offset;
    return !rope || rope_check(m->size, base, offset, error);
}

/* y [rows, width] @ w [width, width] (transposed: w^T) -> out [rows, width]. */
static void square_product(const double *y, const double *w, size_t rows, size_t width,
                           bool transposed, double *out) {
    size_t i, j, k;
    for (i = 0; i < rows; i++) {
        for (j = 0; j < width; j++) {
            double total = 0.0;
            for (k = 0; k < width; k++) {
                total += y[i * width + k] * (transposed ? w[j * width + k] : w[k * width + j]);
            }
            out[i * width + j] = total;
        }
    }
}

/* The forward pass. heads[0..2]: Q (turned), K (turned), V per head, [B,H,T,size] each;
 * a: [B,H,T,T]; merged: [B*T, width]. All fresh memory. */
typedef struct {
    size_t batch, tokens;
    double *heads[3], *a, *merged;
} MhaPass;

static void mha_pass_free(MhaPass *p) {
    free(p->heads[0]), free(p->heads[1]), free(p->heads[2]), free(p->a), free(p->merged);
}

static double *zeros(size_t count) { return checked(calloc(count ? count : 1, sizeof(double))); }

static bool mha_run(const MultiHead *m, const Tensor *x, bool causal, MhaPass *p, char *error) {
    size_t rows, b, h, t, u, j, n, size = m->size, width = m->width, tokens;
    double *projected = NULL, scale = sqrt((double)m->size);
    if (x->rank != 3 || x->shape[2] != width) {
        snprintf(error, ERROR_SIZE, "input must be [batch, tokens, %lu]", (unsigned long)width);
        return false;
    }
    p->batch = x->shape[0], p->tokens = tokens = x->shape[1];
    rows = p->batch * tokens;
    projected = zeros(rows * width);
    for (n = 0; n < 3; n++) {
        square_product(x->values, m->w[n]->values, rows, width, false, projected);
        p->heads[n] = zeros(rows * width);
        for (b = 0; b < p->batch; b++)
            for (h = 0; h < m->heads; h++)
                for (t = 0; t < tokens; t++)
                    for (j = 0; j < size; j++)
                        p->heads[n][((b * m->heads + h) * tokens + t) * size + j] =
                            projected[(b * tokens + t) * width + h * size + j];
        if (m->rope && n < 2) rope_turn(p->heads[n], rows * m->heads, tokens, size, m->base, m->offset, 1.0);
    }
    free(projected);
    p->a = zeros(p->batch * m->heads * tokens * tokens);
    p->merged = zeros(rows * width);
    for (b = 0; b < p->batch; b++) {
        for (h = 0; h < m->heads; h++) {
            size_t at = (b * m->heads + h) * tokens;
            const double *q = p->heads[0] + at * size, *k = p->heads[1] + at * size;
            const double *v = p->heads[2] + at * size;
            double *a = p->a + at * tokens;
            for (t = 0; t < tokens; t++) {
                size_t seen = causal ? t + 1 : tokens;
                double max = -INFINITY, total = 0.0;
                for (u = 0; u < seen; u++) {
                    double dot = 0.0;
                    for (j = 0; j < size; j++) dot += q[t * size + j] * k[u * size + j];
                    a[t * tokens + u] = dot / scale;
                    max = fmax(max, a[t * tokens + u]);
                }
                for (u = 0; u < seen; u++) total += a[t * tokens + u] = exp(a[t * tokens + u] - max);
                for (u = 0; u < seen; u++) a[t * tokens + u] /= total;
                for (j = 0; j < size; j++) {
                    double mix = 0.0;
                    for (u = 0; u < tokens; u++) mix += a[t * tokens + u] * v[u * size + j];
                    p->merged[(b * tokens + t) * width + h * size + j] = mix;
                }
            }
        }
    }
    return true;
}

/* out = {weights [B,H,T,T], merged [B,T,width], output = merged W_O}. */
static bool mha_forward(const MultiHead *m, const Tensor *x, bool causal, Tensor out[3], char *error) {
    MhaPass p;
    size_t shape[4];
    if (!mha_run(m, x, causal, &p, error)) return false;
    shape[0] = p.batch, shape[1] = m->heads, shape[2] = p.tokens, shape[3] = p.tokens;
    out[0] = tensor_new(4, shape);
    memcpy(out[0].values, p.a, out[0].size * sizeof(double));
    out[1] = tensor_new(3, x->shape);
    memcpy(out[1].values, p.merged, out[1].size * sizeof(double));
    out[2] = tensor_new(3, x->shape);
    square_product(p.merged, m->w[3]->values, p.batch * p.tokens, m->width, false, out[2].values);
    mha_pass_free(&p);
    return true;
}

/* out = {grad_input, grad_w_query, grad_w_key, grad_w_value, grad_w_output}. */
static bool mha_backward(const MultiHead *m, const Tensor *x, bool causal, const Tensor *grad_output,
                         Tensor out[5], char *error) {
    MhaPass p;
    size_t rows, b, h, t, u, j, i, n, size = m->size, width = m->width, tokens, shape[2];
    double *grad_merged, *grads[3], *path, scale = sqrt((double)m->size);
    if (!mha_run(m, x, causal, &p, error)) return false;
    tokens = p.tokens, rows = p.batch * tokens;
    if (grad_output->rank != 3 || grad_output->shape[0] != p.batch ||
        grad_output->shape[1] != tokens || grad_output->shape[2] != width) {
        snprintf(error, ERROR_SIZE, "grad_output must have the input's shape");
        mha_pass_free(&p);
        return false;
    }
    shape[0] = width, shape[1] = width;
    out[4] = tensor_new(2, shape); /* dW_O = merged^T dY */
    for (i = 0; i < width; i++)
        for (j = 0; j < width; j++)
            for (n = 0; n < rows; n++)
                out[4].values[i * width + j] += p.merged[n * width + i] * grad_output->values[n * width + j];
    grad_merged = zeros(rows * width); /* dY W_O^T */
    square_product(grad_output->values, m->w[3]->values, rows, width, true, grad_merged);
    for (n = 0; n < 3; n++) grads[n] = zeros(rows * m->heads * size); /* per head, [B,H,T,size] */
    for (b = 0; b < p.batch; b++) {
        for (h = 0; h < m->heads; h++) {
            size_t at = (b * m->heads + h) * tokens;
            const double *q = p.heads[0] + at * size, *k = p.heads[1] + at * size;
            const double *v = p.heads[2] + at * size, *a = p.a + at * tokens;
            double *ds = zeros(tokens * tokens);
            for (t = 0; t < tokens; t++) {
                double row_sum = 0.0;
                for (u = 0; u < tokens; u++) {
                    double da = 0.0;
                    for (j = 0; j < size; j++) da += grad_merged[(b * tokens + t) * width + h * size + j] * v[u * size + j];
                    ds[t * tokens + u] = da;
                    row_sum += da * a[t * tokens + u];
                }
                for (u = 0; u < tokens; u++) ds[t * tokens + u] = a[t * tokens + u] * (ds[t * tokens + u] - row_sum) / scale;
            }
            for (t = 0; t < tokens; t++) {
                for (j = 0; j < size; j++) {
                    double dq = 0.0, dk = 0.0, dv = 0.0;
                    for (u = 0; u < tokens; u++) {
                        dq += ds[t * tokens + u] * k[u * size + j];
                        dk += ds[u * tokens + t] * q[u * size + j];
                        dv += a[u * tokens + t] * grad_merged[(b * tokens + u) * width + h * size + j];
                    }
                    grads[0][(at + t) * size + j] = dq;
                    grads[1][(at + t) * size + j] = dk;
                    grads[2][(at + t) * size + j] = dv;
                }
            }
            free(ds);
        }
    }
    if (m->rope) { /* the rotation's reverse carries dQ and dK back */
        rope_turn(grads[0], rows * m->heads, tokens, size, m->base, m->offset, -1.0);
        rope_turn(grads[1], rows * m->heads, tokens, size, m->base, m->offset, -1.0);
    }
    out[0] = tensor_new(3, x->shape);
    path = zeros(rows * width);
    for (n = 0; n < 3; n++) {
        double *merged_grad = zeros(rows * width); /* this branch's gradient back in its columns */
        for (b = 0; b < p.batch; b++)
            for (h = 0; h < m->heads; h++)
                for (t = 0; t < tokens; t++)
                    for (j = 0; j < size; j++)
                        merged_grad[(b * tokens + t) * width + h * size + j] =
                            grads[n][((b * m->heads + h) * tokens + t) * size + j];
        square_product(merged_grad, m->w[n]->values, rows, width, true, path);
        for (i = 0; i < rows * width; i++) out[0].values[i] += path[i];
        out[1 + n] = tensor_new(2, shape); /* dW = X^T dY */
        for (i = 0; i < width; i++)
            for (j = 0; j < width; j++)
                for (t = 0; t < rows; t++)
                    out[1 + n].values[i * width + j] += x->values[t * width + i] * merged_grad[t * width + j];
        free(merged_grad);
        free(grads[n]);
    }
    free(path);
    free(grad_merged);
    mha_pass_free(&p);
    return true;
}

/* ---- the protocol (docs/protocol.md) ------------------------------------------------ */

#define MAX_TENSORS 8

typedef struct {
    size_t count;
    const char *names[MAX_TENSORS];
    Tensor tensors[MAX_TENSORS];
} Reply;


/* request[key], a {"shape": [...], "values": [...]} object, as a fresh tensor. */
static bool request_tensor(const Json *request, const char *key, Tensor *out, char *error) {
    const Json *t = json_get(request, key), *shape = json_get(t, "shape"), *values = json_get(t, "values");
    size_t dims[MAX_RANK], i;
    if (shape == NULL || values == NULL || shape->kind != JSON_ARRAY || values->kind != JSON_ARRAY) {
        snprintf(error, ERROR_SIZE, "\"%s\" must be {\"shape\": [...], \"values\": [...]}", key);
        return false;
    }
    if (shape->count > MAX_RANK) {
        snprintf(error, ERROR_SIZE, "\"%s\" has rank %lu; at most %d is supported", key,
                 (unsigned long)shape->count, MAX_RANK);
        return false;
    }
    for (i = 0; i < shape->count; i++) {
        double dim = shape->items[i].number;
        if (shape->items[i].kind != JSON_NUMBER || dim < 0 || dim != floor(dim) || dim > 1e15) {
            snprintf(error, ERROR_SIZE, "\"%s.shape\" must hold non-negative integers", key);
            return false;
        }
        dims[i] = (size_t)dim;
    }
    *out = tensor_new(shape->count, dims);
    if (out->size != values->count) {
        snprintf(error, ERROR_SIZE, "\"%s\" has %lu values for %lu elements", key,
                 (unsigned long)values->count, (unsigned long)out->size);
        tensor_free(out);
        return false;
    }
    for (i = 0; i < out->size; i++) {
        if (values->items[i].kind != JSON_NUMBER) {
            snprintf(error, ERROR_SIZE, "\"%s.values\" holds a non-number", key);
            tensor_free(out);
            return false;
        }
        out->values[i] = values->items[i].number;
    }
    return true;
}

/* The tensors named in `keys` (count of them), all or none. */
static bool request_tensors(const Json *request, const char *const *keys, size_t count,
                            Tensor *out, char *error) {
    size_t i;
    for (i = 0; i < count; i++) {
        if (!request_tensor(request, keys[i], &out[i], error)) {
            while (i > 0) tensor_free(&out[--i]);
            return false;
        }
    }
    return true;
}

static const char *const FORWARD_KEYS[4] = {"w_query", "w_key", "w_value", "input"};
static const char *const BACKWARD_KEYS[7] = {"w_query", "w_key", "w_value", "input",
                                             "grad_query", "grad_key", "grad_value"};
static const char *const FORWARD_NAMES[3] = {"query", "key", "value"};
static const char *const BACKWARD_NAMES[4] = {"grad_input", "grad_w_query", "grad_w_key", "grad_w_value"};

static bool run_forward(const Json *request, Reply *reply, char *error) {
    Tensor in[4];
    const Tensor *weights[3];
    QkvProjections layer;
    bool ok;
    size_t i;
    if (!request_tensors(request, FORWARD_KEYS, 4, in, error)) return false;
    weights[0] = &in[0], weights[1] = &in[1], weights[2] = &in[2];
    ok = qkv_new(&layer, weights, error) && qkv_forward(&layer, &in[3], reply->tensors, error);
    if (ok) {
        reply->count = 3;
        for (i = 0; i < 3; i++) reply->names[i] = FORWARD_NAMES[i];
    }
    for (i = 0; i < 4; i++) tensor_free(&in[i]);
    return ok;
}

static bool run_backward(const Json *request, Reply *reply, char *error) {
    Tensor in[7];
    const Tensor *weights[3], *upstream[3];
    QkvProjections layer;
    bool ok;
    size_t i;
    if (!request_tensors(request, BACKWARD_KEYS, 7, in, error)) return false;
    weights[0] = &in[0], weights[1] = &in[1], weights[2] = &in[2];
    upstream[0] = &in[4], upstream[1] = &in[5], upstream[2] = &in[6];
    ok = qkv_new(&layer, weights, error) &&
         qkv_backward(&layer, &in[3], upstream, reply->tensors, error);
    if (ok) {
        reply->count = 4;
        for (i = 0; i < 4; i++) reply->names[i] = BACKWARD_NAMES[i];
    }
    for (i = 0; i < 7; i++) tensor_free(&in[i]);
    return ok;
}

static const char *const HEAD_FORWARD_NAMES[3] = {"scores", "weights", "output"};

/* request["causal"], which must be true or false. */
static bool request_causal(const Json *request, bool *causal, char *error) {
    const Json *flag = json_get(request, "causal");
    if (flag == NULL || flag->kind != JSON_BOOL) {
        snprintf(error, ERROR_SIZE, "\"causal\" must be true or false");
        return false;
    }
    *causal = flag->number != 0;
    return true;
}

static bool run_head_forward(const Json *request, Reply *reply, char *error) {
    Tensor in[4], qkv[3];
    const Tensor *weights[3];
    QkvProjections layer;
    bool ok, causal = false;
    size_t i;
    if (!request_causal(request, &causal, error)) return false;
    if (!request_tensors(request, FORWARD_KEYS, 4, in, error)) return false;
    weights[0] = &in[0], weights[1] = &in[1], weights[2] = &in[2];
    ok = qkv_new(&layer, weights, error) && head_run(&layer, &in[3], causal, reply->tensors, qkv,
                                                     error);
    if (ok) {
        reply->count = 3;
        for (i = 0; i < 3; i++) reply->names[i] = HEAD_FORWARD_NAMES[i], tensor_free(&qkv[i]);
    }
    for (i = 0; i < 4; i++) tensor_free(&in[i]);
    return ok;
}

static const char *const HEAD_BACKWARD_KEYS[5] = {"w_query", "w_key", "w_value", "input",
                                                  "grad_output"};

static bool run_head_backward(const Json *request, Reply *reply, char *error) {
    Tensor in[5];
    const Tensor *weights[3];
    QkvProjections layer;
    bool ok, causal = false;
    size_t i;
    if (!request_causal(request, &causal, error)) return false;
    if (!request_tensors(request, HEAD_BACKWARD_KEYS, 5, in, error)) return false;
    weights[0] = &in[0], weights[1] = &in[1], weights[2] = &in[2];
    ok = qkv_new(&layer, weights, error) &&
         head_backward(&layer, &in[3], causal, &in[4], reply->tensors, error);
    if (ok) {
        reply->count = 4;
        for (i = 0; i < 4; i++) reply->names[i] = BACKWARD_NAMES[i];
    }
    for (i = 0; i < 5; i++) tensor_free(&in[i]);
    return ok;
}

/* request[key], which must be a JSON number. */
static bool request_number(const Json *request, const char *key, double *out, char *error) {
    const Json *number = json_get(request, key);
    if (number == NULL || number->kind != JSON_NUMBER) {
        snprintf(error, ERROR_SIZE, "\"%s\" must be a number", key);
        return false;
    }
    *out = number->number;
    return true;
}

/* rope (sign 1) or rope_reverse (sign -1): the input turned. */
static bool run_turn(const Json *request, Reply *reply, char *error, double sign) {
    Tensor in;
    double base, offset;
    size_t width, tokens;
    if (!request_number(request, "base", &base, error) ||
        !request_number(request, "offset", &offset, error)) return false;
    if (!request_tensor(request, "input", &in, error)) return false;
    if (in.rank < 2) {
        snprintf(error, ERROR_SIZE, "RoPE needs [..., tokens, width]");
        tensor_free(&in);
        return false;
    }
    width = in.shape[in.rank - 1], tokens = in.shape[in.rank - 2];
    if (!rope_check(width, base, offset, error)) {
        tensor_free(&in);
        return false;
    }
    rope_turn(in.values, width ? in.size / width : 0, tokens, width, base, offset, sign);
    reply->count = 1;
    reply->names[0] = sign > 0 ? "rotated" : "turned_back";
    reply->tensors[0] = in;
    return true;
}

static bool run_rope(const Json *request, Reply *reply, char *error) {
    return run_turn(request, reply, error, 1.0);
}

static bool run_rope_reverse(const Json *request, Reply *reply, char *error) {
    return run_turn(request, reply, error, -1.0);
}

static const char *const MHA_KEYS[6] = {"w_query", "w_key", "w_value", "w_output", "input",
                                        "grad_output"};
static const char *const MHA_FORWARD_NAMES[3] = {"weights", "merged", "output"};
static const char *const MHA_BACKWARD_NAMES[5] = {"grad_input", "grad_w_query", "grad_w_key",
                                                  "grad_w_value", "grad_w_output"};

static bool run_mha(const Json *request, Reply *reply, char *error, bool backward) {
    Tensor in[6];
    const Tensor *weights[4];
    const Json *rope = json_get(request, "rope");
    MultiHead layer;
    double heads = 0, base = 0, offset = 0;
    bool ok, causal = false;
    size_t i, count = backward ? 6 : 5;
    if (!request_causal(request, &causal, error) ||
        !request_number(request, "heads", &heads, error) ||
        !request_number(request, "base", &base, error) ||
        !request_number(request, "offset", &offset, error)) return false;
    if (rope == NULL || rope->kind != JSON_BOOL) {
        snprintf(error, ERROR_SIZE, "\"rope\" must be true or false");
        return false;
    }
    if (!request_tensors(request, MHA_KEYS, count, in, error)) return false;
    for (i = 0; i < 4; i++) weights[i] = &in[i];
    ok = mha_new(&layer, weights, heads, rope->number != 0, base, offset, error) &&
         (backward ? mha_backward(&layer, &in[4], causal, &in[5], reply->tensors, error)
                   : mha_forward(&layer, &in[4], causal, reply->tensors, error));
    if (ok) {
        reply->count = backward ? 5 : 3;
        for (i = 0; i < reply->count; i++)
            reply->names[i] = backward ? MHA_BACKWARD_NAMES[i] : MHA_FORWARD_NAMES[i];
    }
    for (i = 0; i < count; i++) tensor_free(&in[i]);
    return ok;
}

static bool run_mha_forward(const Json *request, Reply *reply, char *error) {
    return run_mha(request, reply, error, false);
}

static bool run_mha_backward(const Json *request, Reply *reply, char *error) {
    return run_mha(request, reply, error, true);
}

/* The operations this program answers, listed in the hello reply as "ops". */
static const struct {
    const char *op;
    bool (*run)(const Json *request, Reply *reply, char *error);
} OPERATIONS[] = {{"forward", run_forward}, {"backward", run_backward},
                  {"head_forward", run_head_forward}, {"head_backward", run_head_backward},
                  {"rope", run_rope}, {"rope_reverse", run_rope_reverse},
                  {"mha_forward", run_mha_forward}, {"mha_backward", run_mha_backward}};
#define OPERATION_COUNT (sizeof OPERATIONS / sizeof OPERATIONS[0])

static void write_tensor(FILE *out, const Tensor *t) {
    size_t i;
    fputs("{\"shape\":[", out);
    for (i = 0; i < t->rank; i++) fprintf(out, "%s%lu", i ? "," : "", (unsigned long)t->shape[i]);
    fputs("],\"values\":[", out);
    for (i = 0; i < t->size; i++) {
        if (i) fputc(',', out);
        write_number(out, t->values[i]);
    }
    fputs("]}", out);
}

static void write_error(FILE *out, const Json *id, const char *message) {
    fputs("{\"id\":", out);
    write_number(out, id->number);
    fputs(",\"error\":", out);
    write_string(out, message);
    fputs("}\n", out);
}

/* One reply line for `request` on `out`; true when it was bye. */
static bool answer(const Json *request, FILE *out) {
    const Json *id = json_get(request, "id"), *op = json_get(request, "op");
    const char *name = op != NULL && op->kind == JSON_STRING ? op->string : "";
    char error[ERROR_SIZE];
    Reply reply;
    size_t i, n;
    if (strcmp(name, "hello") == 0) {
        fputs("{\"id\":", out);
        write_number(out, id->number);
        fputs(",\"version\":1,\"ops\":[", out);
        for (n = 0; n < OPERATION_COUNT; n++) fprintf(out, "%s\"%s\"", n ? "," : "", OPERATIONS[n].op);
        fputs("]}\n", out);
        return false;
    }
    if (strcmp(name, "bye") == 0) {
        fputs("{\"id\":", out);
        write_number(out, id->number);
        fputs("}\n", out);
        return true;
    }
    for (n = 0; n < OPERATION_COUNT && strcmp(name, OPERATIONS[n].op) != 0; n++) {}
    if (n == OPERATION_COUNT) {
        snprintf(error, ERROR_SIZE, "unknown op \"%.100s\"", name);
        write_error(out, id, error);
        return false;
    }
    reply.count = 0;
    if (!OPERATIONS[n].run(request, &reply, error)) {
        write_error(out, id, error);
        return false;
    }
    for (i = 0; i < reply.count && tensor_finite(&reply.tensors[i]); i++) {}
    if (i < reply.count) {
        /* JSON has no infinity: a result that overflowed is reported, not sent. */
        snprintf(error, ERROR_SIZE, "%s overflowed: inf is not a number JSON can hold", reply.names[i]);
        write_error(out, id, error);
    } else {
        fputs("{\"id\":", out);
        write_number(out, id->number);
        for (i = 0; i < reply.count; i++) {
            fprintf(out, ",\"%s\":", reply.names[i]);
            write_tensor(out, &reply.tensors[i]);
        }
        fputs("}\n", out);
    }
    for (i = 0; i < reply.count; i++) tensor_free(&reply.tensors[i]);
    return false;
}

/* One line of `in` without its newline, in fresh memory; NULL at the end of input. */
static char *read_line(FILE *in) {
    size_t length = 0, capacity = 4096;
    char *line = checked(malloc(capacity));
    int c;
    while ((c = getc(in)) != EOF && c != '\n') {
        if (length + 1 == capacity) line = checked(realloc(line, capacity *= 2));
        line[length++] = (char)c;
    }
    if (c == EOF && length == 0) {
        free(line);
        return NULL;
    }
    line[length] = '\0';
    return line;
}

int main(int argc, char **argv) {
    char *line;
    if (argc == 3 && strcmp(argv[1], "--wrong") == 0 &&
        strcmp(argv[2], "key-path-uses-query-weight") == 0) {
        wrong_key_path = true; /* WRONG on purpose: dX's key path uses W_Q */
    } else if (argc == 3 && strcmp(argv[1], "--wrong") == 0 &&
               strcmp(argv[2], "head-dk-uses-ds") == 0) {
        wrong_head_dk = true; /* WRONG on purpose: the head's dK uses dS, not dS^T */
    } else if (argc != 1) {
        fputs("usage: qkv_projections [--wrong key-path-uses-query-weight|head-dk-uses-ds]\n",
              stderr);
        return 2;
    }
    while ((line = read_line(stdin)) != NULL) {
        Json request;
        char error[ERROR_SIZE];
        bool bye;
        if (strspn(line, " \t\r") == strlen(line)) {
            free(line);
            continue;
        }
        strcpy(error, "no \"id\"");
        if (!json_parse(line, &request, error) || json_get(&request, "id") == NULL ||
            json_get(&request, "id")->kind != JSON_NUMBER) {
            /* stderr, not stdout: qkv shows it when the check fails */
            fprintf(stderr, "qkv_projections: a request that is not a JSON object with an id: %s\n",
                    error);
            json_free(&request);
            free(line);
            return 1;
        }
        bye = answer(&request, stdout);
        fflush(stdout); /* qkv waits for each reply before sending the next request */
        json_free(&request);
        free(line);
        if (bye) return 0;
    }
    return 0;
}
