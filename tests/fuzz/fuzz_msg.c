/* Fuzz the phase-protocol parser js_msg_parse (docs/phase-protocol.md): the
 * datagram a job's process sends to slurmstepd. Input: one message, as
 * received (not NUL-terminated). */
#include <errno.h>

#include "fuzz.h"
#include "js_parse.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	/* the server passes the datagram as received: no NUL, exact length */
	char *buf = malloc(n ? n : 1);
	if (!buf)
		abort();
	memcpy(buf, d, n);
	struct js_msg m;
	const char *why = NULL;
	int rc = js_msg_parse(buf, n, &m, &why);
	if (rc) {
		FUZZ_CHECK(rc == EINVAL || rc == EPROTO || rc == EMSGSIZE);
		FUZZ_CHECK(why && why[0]);
		FUZZ_CHECK(n <= JS_MSG_MAX || rc == EMSGSIZE);
	} else {
		FUZZ_CHECK(n <= JS_MSG_MAX);
		FUZZ_CHECK(m.op == JS_OP_BEGIN || m.op == JS_OP_END || m.op == JS_OP_PING);
		FUZZ_CHECK(m.rank >= -1);
		FUZZ_CHECK(m.bytes >= -1);
		FUZZ_CHECK(m.bytes == -1 || m.op == JS_OP_END);
		FUZZ_CHECK(memchr(m.kind, 0, sizeof(m.kind)) && memchr(m.label, 0, sizeof(m.label)));
		if (m.op == JS_OP_BEGIN) {
			FUZZ_CHECK(js_kind_valid(m.kind));
			FUZZ_CHECK(!m.label[0] || js_label_valid(m.label));
			/* what the parser returns is in the message */
			FUZZ_CHECK(memmem(buf, n, m.kind, strlen(m.kind)));
		} else {
			FUZZ_CHECK(!m.kind[0] && !m.label[0]);
		}
		/* the parser accepts runs of spaces (strtok) where the protocol
		 * asks single ones; the version still comes first */
		size_t sp = 0;
		while (sp < n && buf[sp] == ' ')
			sp++;
		FUZZ_CHECK(n - sp >= 4 && !memcmp(buf + sp, "JS1 ", 4));
	}
	free(buf);
	return 0;
}
