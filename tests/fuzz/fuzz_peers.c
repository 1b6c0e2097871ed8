/*
 * fuzz_peers.c - libFuzzer target over the peers protocol codec
 * (agent/peers_wire.c).
 *
 * The input is read as a peer would read a session: a hello, a status
 * line, then a stream of messages. A DEFINE that decodes becomes the table
 * of the updates after it, as on a session; every payload is also decoded
 * as each stick-table message against a few fixed tables (every key type,
 * every data type), so that updates are reached without a DEFINE first.
 * Whatever decodes is encoded again into small fixed buffers, decoded once
 * more and compared: both directions, the writer's refusals (the writer
 * untouched), the views' bounds (ASan) and the arithmetic (UBSan).
 *
 *   clang -fsanitize=fuzzer,address,undefined -I. tests/fuzz/fuzz_peers.c agent/peers_wire.c
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agent/peers_wire.h"

/* An invariant of the codec does not hold: let libFuzzer report it. */
#define CHECK(cond) do { if (!(cond)) abort(); } while (0)

#define SMALL_BUF 96    /* a writer that often overflows */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool within(const void *ptr, size_t len, const uint8_t *p, size_t plen)
{
	const uint8_t *q = ptr;

	return len == 0 || (q >= p && len <= plen && (size_t)(q - p) <= plen - len);
}

static bool err_known(enum peers_wire_err e)
{
	return (unsigned)e < PEERS_WIRE_ERR_COUNT && e != PEERS_WIRE_ERR_NONE;
}

/* An encoder's result: 0 with the writer grown, or -1 with it untouched. */
static bool encoded(const struct peers_wire_writer *w, size_t before, int r)
{
	CHECK(r == 0 || r == -1);
	CHECK(w->len <= w->cap);
	if (r < 0)
		CHECK(w->len == before);
	return r == 0;
}

/* ---- hello and status ---- */

static void check_hello(const uint8_t *p, size_t len)
{
	struct peers_wire_hello h, h2;
	enum peers_wire_err err = PEERS_WIRE_ERR_NONE;
	uint8_t buf[2 * PEERS_WIRE_LINE_MAX];
	struct peers_wire_writer w;
	int r = peers_wire_hello_decode(p, len, &h, &err);

	if (r < 0) {
		CHECK(err_known(err));
		CHECK(peers_wire_err_status(err) == 501 || peers_wire_err_status(err) == 502);
		return;
	}
	if (r == 0)
		return;
	CHECK((size_t)r <= len);
	CHECK(h.major == PEERS_WIRE_MAJOR && h.minor <= PEERS_WIRE_MINOR);
	CHECK(within(h.callee.ptr, h.callee.len, p, (size_t)r));
	CHECK(within(h.caller.ptr, h.caller.len, p, (size_t)r));
	CHECK(within(h.rest.ptr, h.rest.len, p, (size_t)r));
	CHECK(memchr(h.caller.ptr ? h.caller.ptr : "", ' ', h.caller.len) == NULL);
	/* what the caller would send with these names reads back the same */
	peers_wire_writer_init(&w, buf, sizeof(buf));
	if (!encoded(&w, 0, peers_wire_encode_hello(&w, h.minor, h.callee, h.caller, 1234)))
		return;
	CHECK(peers_wire_hello_decode(buf, w.len, &h2, &err) == (int)w.len);
	CHECK(h2.minor == h.minor);
	/* names are never empty once encoded */
	CHECK(h2.callee.len == h.callee.len && memcmp(h2.callee.ptr, h.callee.ptr, h.callee.len) == 0);
	CHECK(h2.caller.len == h.caller.len && memcmp(h2.caller.ptr, h.caller.ptr, h.caller.len) == 0);
}

static void check_status(const uint8_t *p, size_t len)
{
	unsigned st = 0, st2 = 0;
	enum peers_wire_err err = PEERS_WIRE_ERR_NONE;
	uint8_t buf[8];
	struct peers_wire_writer w;
	int r = peers_wire_status_decode(p, len, &st, &err);

	if (r < 0)
		CHECK(err == PEERS_WIRE_ERR_STATUS || err == PEERS_WIRE_ERR_LINE);
	if (r <= 0)
		return;
	CHECK((size_t)r <= len && st <= 999);
	peers_wire_writer_init(&w, buf, sizeof(buf));
	if (encoded(&w, 0, peers_wire_encode_status(&w, st))) {
		CHECK(st >= 100);
		CHECK(peers_wire_status_decode(buf, w.len, &st2, &err) == 4 && st2 == st);
	}
}

/* ---- tables ---- */

static bool table_same(const struct peers_wire_table *a, const struct peers_wire_table *b)
{
	return a->id == b->id && a->name.len == b->name.len &&
	       memcmp(a->name.ptr, b->name.ptr, a->name.len) == 0 && a->key_type == b->key_type &&
	       a->key_len == b->key_len && a->data == b->data && a->has_expire == b->has_expire &&
	       a->expire == b->expire && memcmp(a->period, b->period, sizeof(a->period)) == 0 &&
	       memcmp(a->nbelem, b->nbelem, sizeof(a->nbelem)) == 0;
}

/* A payload as a DEFINE: 1 with *t set if it decodes, 0 if not. */
static int check_define(const uint8_t *p, size_t len, struct peers_wire_table *t)
{
	struct peers_wire_table back;
	struct peers_wire_msg m;
	enum peers_wire_err err = PEERS_WIRE_ERR_NONE;
	uint8_t buf[SMALL_BUF * 4];
	struct peers_wire_writer w;
	int r = peers_wire_define_decode(p, len, t, &err);

	if (r < 0) {
		CHECK(err_known(err));
		return 0;
	}
	CHECK((size_t)r <= len);
	CHECK(t->name.len > 0 && within(t->name.ptr, t->name.len, p, len));
	CHECK(t->key_len >= 1);
	for (unsigned i = 0; i < PEERS_WIRE_DT_COUNT; i++)
		CHECK(t->nbelem[i] <= PEERS_WIRE_ARRAY_MAX);
	/* encoded again (when this codec knows every type of it) and read back */
	peers_wire_writer_init(&w, buf, sizeof(buf));
	if ((t->data & ~PEERS_WIRE_DT_KNOWN) == 0 &&
	    encoded(&w, 0, peers_wire_encode_define(&w, t))) {
		CHECK(peers_wire_msg_decode(buf, w.len, PEERS_WIRE_MSG_MAX, &m, &err) == (int)w.len);
		CHECK(m.kind == PEERS_WIRE_MSG_DEFINE);
		CHECK(peers_wire_define_decode(m.payload, m.len, &back, &err) == (int)m.len);
		CHECK(table_same(t, &back));
	}
	return 1;
}

static bool freq_same(const struct peers_wire_freq *a, const struct peers_wire_freq *b)
{
	return a->age == b->age && a->curr == b->curr && a->prev == b->prev;
}

/* The values of every type both updates decoded are the same. */
static bool values_same(const struct peers_wire_table *t, const struct peers_wire_update *a,
			const struct peers_wire_update *b)
{
	if (a->decoded != b->decoded)
		return false;
	for (unsigned i = 0; i < PEERS_WIRE_DT_COUNT; i++) {
		if (!(a->decoded & PEERS_WIRE_DT_BIT(i)))
			continue;
		switch (peers_wire_dt_enc(i)) {
		case PEERS_WIRE_ENC_UINT:
		case PEERS_WIRE_ENC_SINT:
		case PEERS_WIRE_ENC_ULL:
			if (a->u[i] != b->u[i])
				return false;
			break;
		case PEERS_WIRE_ENC_FREQ:
			if (!freq_same(&a->f[i], &b->f[i]))
				return false;
			break;
		case PEERS_WIRE_ENC_DICT:
			if (a->server_key.present != b->server_key.present ||
			    (a->server_key.present &&
			     (a->server_key.id != b->server_key.id ||
			      a->server_key.has_value != b->server_key.has_value ||
			      a->server_key.value.len != b->server_key.value.len ||
			      (a->server_key.value.len &&
			       memcmp(a->server_key.value.ptr, b->server_key.value.ptr,
				      a->server_key.value.len) != 0))))
				return false;
			break;
		case PEERS_WIRE_ENC_ARRAY_UINT:
			for (uint32_t k = 0; k < t->nbelem[i]; k++)
				if ((i == PEERS_WIRE_DT_GPT ? a->gpt[k] != b->gpt[k] : a->gpc[k] != b->gpc[k]))
					return false;
			break;
		case PEERS_WIRE_ENC_ARRAY_FREQ:
			for (uint32_t k = 0; k < t->nbelem[i]; k++)
				if (!freq_same(&a->gpc_rate[k], &b->gpc_rate[k]))
					return false;
			break;
		}
	}
	return true;
}

/* A payload as an update of type `type` for the table t. */
static void check_update(uint8_t type, const uint8_t *p, size_t len, const struct peers_wire_table *t)
{
	static struct peers_wire_update u, back;
	struct peers_wire_msg m;
	enum peers_wire_err err = PEERS_WIRE_ERR_NONE;
	uint8_t buf[SMALL_BUF];
	struct peers_wire_writer w;
	size_t used;
	int r = peers_wire_update_decode(type, p, len, t, &u, &err);

	if (r < 0) {
		CHECK(err_known(err));
		return;
	}
	CHECK((size_t)r + u.trailing == len);
	CHECK(u.decoded == (t->data & PEERS_WIRE_DT_KNOWN));
	CHECK(within(u.key.ptr, u.key.len, p, len));
	if (t->key_type == PEERS_WIRE_KEY_STRING)
		CHECK(u.key.len < t->key_len);
	else
		CHECK(u.key.len == t->key_len);
	if ((u.decoded & PEERS_WIRE_DT_BIT(PEERS_WIRE_DT_SERVER_KEY)) && u.server_key.present)
		CHECK(u.server_key.id >= 1 && u.server_key.id <= PEERS_WIRE_DICT_MAX &&
		      within(u.server_key.value.ptr, u.server_key.value.len, p, len));
	/* encoded again, after a message already in the writer */
	peers_wire_writer_init(&w, buf, sizeof(buf));
	CHECK(peers_wire_encode_ctrl(&w, PEERS_WIRE_MSG_HEARTBEAT) == 0);
	used = w.len;
	if ((t->data & ~PEERS_WIRE_DT_KNOWN) || !encoded(&w, used, peers_wire_encode_update(&w, t, &u)))
		return;
	CHECK(buf[0] == 0x00 && buf[1] == 0x04);
	CHECK(peers_wire_msg_decode(buf + used, w.len - used, PEERS_WIRE_MSG_MAX, &m, &err) ==
	      (int)(w.len - used));
	CHECK(m.type == type);
	CHECK(peers_wire_update_decode(m.type, m.payload, m.len, t, &back, &err) == (int)m.len);
	CHECK(back.trailing == 0);
	CHECK(back.id == u.id && back.expire == u.expire);
	CHECK(back.key.len == u.key.len && back.key.integer == u.key.integer &&
	      (u.key.len == 0 || memcmp(back.key.ptr, u.key.ptr, u.key.len) == 0));
	CHECK(values_same(t, &u, &back));
}

static void check_ack_switch(const uint8_t *p, size_t len)
{
	uint64_t table, table2;
	uint32_t id, id2;
	uint8_t buf[32];
	struct peers_wire_writer w;
	struct peers_wire_msg m;
	enum peers_wire_err err = PEERS_WIRE_ERR_NONE;
	int r;

	r = peers_wire_ack_decode(p, len, &table, &id, &err);
	CHECK(r <= (int)len && (r > 0 || err_known(err)));
	peers_wire_writer_init(&w, buf, sizeof(buf));
	if (r > 0 && encoded(&w, 0, peers_wire_encode_ack(&w, table, id))) {
		CHECK(peers_wire_msg_decode(buf, w.len, PEERS_WIRE_MSG_MAX, &m, &err) == (int)w.len);
		CHECK(m.kind == PEERS_WIRE_MSG_ACK);
		CHECK(peers_wire_ack_decode(m.payload, m.len, &table2, &id2, &err) == (int)m.len);
		CHECK(table2 == table && id2 == id);
	}
	r = peers_wire_switch_decode(p, len, &table, &err);
	CHECK(r <= (int)len && (r > 0 || err_known(err)));
	peers_wire_writer_init(&w, buf, sizeof(buf));
	if (r > 0 && encoded(&w, 0, peers_wire_encode_switch(&w, table))) {
		CHECK(peers_wire_msg_decode(buf, w.len, PEERS_WIRE_MSG_MAX, &m, &err) == (int)w.len);
		CHECK(peers_wire_switch_decode(m.payload, m.len, &table2, &err) == (int)m.len);
		CHECK(table2 == table);
	}
}

/* Fixed tables the payloads are also read against. */
static struct peers_wire_table fixed[5];

static void fixed_init(void)
{
	static const struct {
		enum peers_wire_key_type kt;
		uint32_t key_len;
		uint64_t data;
	} f[5] = {
		{ PEERS_WIRE_KEY_IPV4, 4, PEERS_WIRE_DT_KNOWN },
		{ PEERS_WIRE_KEY_STRING, 9, PEERS_WIRE_DT_BIT(9) | PEERS_WIRE_DT_BIT(10) },
		{ PEERS_WIRE_KEY_INTEGER, 4, PEERS_WIRE_DT_BIT(22) | PEERS_WIRE_DT_BIT(23) | PEERS_WIRE_DT_BIT(24) },
		{ PEERS_WIRE_KEY_IPV6, 16, PEERS_WIRE_DT_BIT(19) | PEERS_WIRE_DT_BIT(33) },
		{ PEERS_WIRE_KEY_BINARY, 3, PEERS_WIRE_DT_BIT(0) | PEERS_WIRE_DT_BIT(26) },
	};

	for (size_t i = 0; i < 5; i++) {
		fixed[i] = (struct peers_wire_table){ .id = i + 1, .name = { "/f", 2 },
						      .key_type = f[i].kt, .key_len = f[i].key_len,
						      .data = f[i].data, .has_expire = true };
		fixed[i].nbelem[PEERS_WIRE_DT_GPT] = 2;
		fixed[i].nbelem[PEERS_WIRE_DT_GPC] = 1;
		fixed[i].nbelem[PEERS_WIRE_DT_GPC_RATE] = 3;
	}
}

/* A payload as every stick-table message. */
static void walk_payload(const uint8_t *p, size_t len)
{
	static const uint8_t types[] = { 0x80, 0x81, 0x85, 0x86 };
	struct peers_wire_table t;

	if (check_define(p, len, &t))
		check_update(0x80, p, len, &t);
	check_ack_switch(p, len);
	for (size_t i = 0; i < 5; i++)
		check_update(types[(i + len) % 4], p, len, &fixed[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct peers_wire_table cur;
	bool have_cur = false;
	size_t off = 0;

	if (!fixed[0].key_len)
		fixed_init();
	check_hello(data, size);
	check_status(data, size);
	walk_payload(data, size);

	/* a session: hello or status first when they decode, then messages */
	for (int r; off < size; off += (size_t)r) {
		struct peers_wire_msg m;
		struct peers_wire_hello h;
		unsigned st;
		enum peers_wire_err err = PEERS_WIRE_ERR_NONE;

		r = off == 0 ? peers_wire_hello_decode(data, size, &h, &err) : 0;
		if (r <= 0 && off == 0)
			r = peers_wire_status_decode(data, size, &st, &err);
		if (r > 0)
			continue;
		err = PEERS_WIRE_ERR_NONE;
		r = peers_wire_msg_decode(data + off, size - off, PEERS_WIRE_MSG_MAX, &m, &err);
		if (r <= 0) {
			CHECK(r == 0 || err_known(err));
			/* one byte less of a whole message always needs more */
			break;
		}
		CHECK((size_t)r <= size - off);
		CHECK(peers_wire_msg_decode(data + off, (size_t)r - 1, PEERS_WIRE_MSG_MAX, &m, &err) == 0);
		CHECK(peers_wire_msg_decode(data + off, (size_t)r, PEERS_WIRE_MSG_MAX, &m, &err) == r);
		CHECK(m.len <= PEERS_WIRE_MSG_MAX);
		CHECK(within(m.payload, m.len, data + off, (size_t)r));
		CHECK(m.kind == peers_wire_msg_kind(m.cls, m.type));
		CHECK(peers_wire_msg_str(m.kind) != NULL);
		switch (m.kind) {
		case PEERS_WIRE_MSG_DEFINE:
			have_cur = check_define(m.payload, m.len, &cur);
			break;
		case PEERS_WIRE_MSG_UPDATE:
		case PEERS_WIRE_MSG_INCUPDATE:
		case PEERS_WIRE_MSG_UPDATE_TIMED:
		case PEERS_WIRE_MSG_INCUPDATE_TIMED:
			if (have_cur)
				check_update(m.type, m.payload, m.len, &cur);
			break;
		default:
			if (m.payload)
				walk_payload(m.payload, m.len);
			break;
		}
	}
	return 0;
}
