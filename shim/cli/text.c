/* Text for terminals and JSON: paths and command names are any bytes. */
#include "cli.h"
#include "utf8.h"

uint64_t realtime_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static size_t utf8_len(const unsigned char *p)
{
	return rs_utf8_len(p);
}

/* Control characters or stray bytes in a path or a command name would
 * garble the terminal or the columns: show them as \xNN. */
void escape_text(const char *in, char *out, size_t len)
{
	size_t o = 0;

	for (const unsigned char *p = (const unsigned char *)in; *p && o + 5 < len;) {
		size_t n = utf8_len(p);

		if (n == 0 || *p < 0x20 || *p == 0x7f) {
			o += (size_t)snprintf(out + o, len - o, "\\x%02x", *p);
			n = 1;
		} else if (o + n + 1 < len) {
			memcpy(out + o, p, n);
			o += n;
		} else {
			break;
		}
		p += n;
	}
	out[o] = '\0';
}

/* A JSON string, or null, to out; bytes that are not UTF-8 become U+FFFD. */
void json_fstring(FILE *out, const char *s)
{
	if (!s) {
		fputs("null", out);
		return;
	}
	putc('"', out);
	for (const unsigned char *p = (const unsigned char *)s; *p;) {
		size_t n = utf8_len(p);

		if (n == 0) {
			fputs("\\ufffd", out);
			n = 1;
		} else if (*p == '"' || *p == '\\') {
			fprintf(out, "\\%c", *p);
		} else if (*p < 0x20 || *p == 0x7f) {
			fprintf(out, "\\u%04x", *p);
		} else {
			fwrite(p, 1, n, out);
		}
		p += n;
	}
	putc('"', out);
}

void json_string(const char *s)
{
	json_fstring(stdout, s);
}

void format_age(char *buf, size_t len, uint64_t now, uint64_t since)
{
	uint64_t ns = now - since, s = ns / 1000000000ull;

	if (since == 0 || since > now)
		snprintf(buf, len, "-");   /* unset, or a clock step */
	else if (s < 60)
		snprintf(buf, len, "%.1fs", (double)ns / 1e9);
	else if (s < 3600)
		snprintf(buf, len, "%um%us", (unsigned)(s / 60), (unsigned)(s % 60));
	else if (s < 86400)
		snprintf(buf, len, "%uh%um", (unsigned)(s / 3600), (unsigned)(s / 60 % 60));
	else
		snprintf(buf, len, "%ud%uh", (unsigned)(s / 86400), (unsigned)(s / 3600 % 24));
}
