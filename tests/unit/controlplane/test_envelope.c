/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests: the envelope encryption of secrets' values
 * (controlplane/store/envelope.h) and the cluster key ring file
 * (store/keyring.h) — round trips, a box bound to its secret, tenant and
 * key (another one, changed bytes, a wrong key of the same name and a
 * missing key never open), rewrapping under a new primary, errors that
 * never hold a value or a key, the key file's format and its reading again
 * when it changes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "store/envelope.h"
#include "store/keyring.h"

/* Keys of 32 bytes: "A" * 32, "B" * 32, "C" * 32 in base64. */
#define KEY_A "QUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUE="
#define KEY_B "QkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkI="
#define KEY_C "Q0NDQ0NDQ0NDQ0NDQ0NDQ0NDQ0NDQ0NDQ0NDQ0NDQ0M="
#define VALUE "sk-live-0123456789abcdef\tTOKEN"

static cp_keyring *ring(const char *text)
{
        cp_keyring *k = NULL;
        sp_error *e = NULL;
        sp_test_ok(cp_keyring_parse(text, strlen(text), &k, &e), &e);
        return k;
}

static void seal_ok(cp_keyring *k, const char *sid, const char *tid, const char *value, cp_sealed *s)
{
        sp_error *e = NULL;
        sp_test_ok(cp_envelope_seal(k, sid, tid, value, strlen(value), s, &e), &e);
}

/* Opens s; returns the error code (SP_OK when it opened) and checks the value and the message. */
static sp_errc open_code(cp_keyring *k, const char *sid, const char *tid, const cp_sealed *s, const char *want)
{
        _cleanup_error_ sp_error *e = NULL;
        char *v = NULL;
        size_t n = 0;
        int r = cp_envelope_open(k, sid, tid, s->key_id, s->wrapped.data, s->wrapped.len, s->ciphertext.data,
                                 s->ciphertext.len, &v, &n, &e);
        if (r == 0) {
                ck_assert_ptr_null(e);
                ck_assert_uint_eq(n, strlen(want));
                ck_assert_mem_eq(v, want, n);
                ck_assert_int_eq(v[n], '\0');
                cp_envelope_value_free(v, n);
                return SP_OK;
        }
        ck_assert_ptr_null(v);
        ck_assert_ptr_nonnull(e);
        ck_assert_int_eq(r, -(int)e->code);
        ck_assert_msg(!strstr(e->message, want), "the error holds the value: %s", e->message);
        return e->code;
}

START_TEST(round_trip)
{
        _cleanup_(cp_keyring_freep) cp_keyring *k = ring("k1 " KEY_A "\n");
        cp_sealed s, t;
        seal_ok(k, "sec_1", "ten_1", VALUE, &s);
        ck_assert_str_eq(s.key_id, "k1");
        ck_assert_uint_eq(s.wrapped.len, CP_ENVELOPE_OVERHEAD + CP_KEY_LEN);
        ck_assert_uint_eq(s.ciphertext.len, CP_ENVELOPE_OVERHEAD + strlen(VALUE));
        ck_assert_int_eq((unsigned char)s.ciphertext.data[0], CP_ENVELOPE_VERSION);
        ck_assert_ptr_null(memmem(s.ciphertext.data, s.ciphertext.len, "sk-live", 7));
        ck_assert_int_eq(open_code(k, "sec_1", "ten_1", &s, VALUE), SP_OK);

        /* The same value twice: another data key and nonces, other bytes. */
        seal_ok(k, "sec_1", "ten_1", VALUE, &t);
        ck_assert(memcmp(s.ciphertext.data, t.ciphertext.data, s.ciphertext.len) != 0);
        ck_assert(memcmp(s.wrapped.data, t.wrapped.data, s.wrapped.len) != 0);
        cp_sealed_clear(&t);

        /* The largest and the smallest values. */
        char *big = malloc(CP_ENVELOPE_VALUE_MAX + 1);
        memset(big, 'x', CP_ENVELOPE_VALUE_MAX);
        big[CP_ENVELOPE_VALUE_MAX] = '\0';
        seal_ok(k, "sec_2", "ten_1", big, &t);
        ck_assert_int_eq(open_code(k, "sec_2", "ten_1", &t, big), SP_OK);
        cp_sealed_clear(&t);
        seal_ok(k, "sec_3", "ten_1", "x", &t);
        ck_assert_int_eq(open_code(k, "sec_3", "ten_1", &t, "x"), SP_OK);
        cp_sealed_clear(&t);

        /* Nothing, or too much: refused without sealing. */
        _cleanup_error_ sp_error *e = NULL, *e2 = NULL;
        ck_assert_int_eq(cp_envelope_seal(k, "sec_4", "ten_1", "", 0, &t, &e), -SP_E_INVALID);
        big[0] = 'y';
        ck_assert_int_eq(cp_envelope_seal(k, "sec_4", "ten_1", big, CP_ENVELOPE_VALUE_MAX + 1, &t, &e2), -SP_E_INVALID);
        ck_assert_uint_eq(t.wrapped.len + t.ciphertext.len, 0);
        free(big);
        cp_sealed_clear(&s);
}
END_TEST

START_TEST(bound_to_secret_and_tenant)
{
        _cleanup_(cp_keyring_freep) cp_keyring *k = ring("k1 " KEY_A "\n");
        cp_sealed s, other;
        seal_ok(k, "sec_1", "ten_1", VALUE, &s);
        seal_ok(k, "sec_2", "ten_1", "another", &other);
        /* Another secret's id or another tenant: the additional data differs. */
        ck_assert_int_eq(open_code(k, "sec_2", "ten_1", &s, VALUE), SP_E_INVALID);
        ck_assert_int_eq(open_code(k, "sec_1", "ten_2", &s, VALUE), SP_E_INVALID);
        /* A ciphertext moved under another secret's wrapped key, or the other way. */
        cp_sealed mixed = {0};
        snprintf(mixed.key_id, sizeof(mixed.key_id), "k1");
        mixed.wrapped = other.wrapped;
        mixed.ciphertext = s.ciphertext;
        ck_assert_int_eq(open_code(k, "sec_1", "ten_1", &mixed, VALUE), SP_E_INVALID);
        ck_assert_int_eq(open_code(k, "sec_2", "ten_1", &mixed, VALUE), SP_E_INVALID);
        cp_sealed_clear(&s);
        cp_sealed_clear(&other);
}
END_TEST

START_TEST(changed_bytes_do_not_open)
{
        _cleanup_(cp_keyring_freep) cp_keyring *k = ring("k1 " KEY_A "\n");
        cp_sealed s;
        seal_ok(k, "sec_1", "ten_1", VALUE, &s);
        /* Each byte of either box flipped: the version, the nonce, the bytes, the tag. */
        for (int which = 0; which < 2; which++) {
                sp_buf *b = which ? &s.ciphertext : &s.wrapped;
                for (size_t i = 0; i < b->len; i++) {
                        b->data[i] ^= 0x01;
                        ck_assert_int_eq(open_code(k, "sec_1", "ten_1", &s, VALUE), SP_E_INVALID);
                        b->data[i] ^= 0x01;
                }
                /* Cut short, or one byte longer. */
                size_t len = b->len;
                for (size_t cut = 0; cut < len; cut += 7) {
                        b->len = cut;
                        ck_assert_int_eq(open_code(k, "sec_1", "ten_1", &s, VALUE), SP_E_INVALID);
                }
                b->len = len;
                sp_buf_append(b, "x", 1, NULL);
                ck_assert_int_eq(open_code(k, "sec_1", "ten_1", &s, VALUE), SP_E_INVALID);
                b->len = len;
        }
        ck_assert_int_eq(open_code(k, "sec_1", "ten_1", &s, VALUE), SP_OK);
        cp_sealed_clear(&s);
}
END_TEST

START_TEST(wrong_or_missing_key)
{
        _cleanup_(cp_keyring_freep) cp_keyring *a = ring("k1 " KEY_A "\n");
        _cleanup_(cp_keyring_freep) cp_keyring *same_name = ring("k1 " KEY_B "\n");
        _cleanup_(cp_keyring_freep) cp_keyring *other = ring("k2 " KEY_A "\n");
        cp_sealed s;
        seal_ok(a, "sec_1", "ten_1", VALUE, &s);
        /* Another key under the same id. */
        ck_assert_int_eq(open_code(same_name, "sec_1", "ten_1", &s, VALUE), SP_E_INVALID);
        /* The same bytes under another id: the wrapped key is bound to its key's id. */
        snprintf(s.key_id, sizeof(s.key_id), "k2");
        ck_assert_int_eq(open_code(other, "sec_1", "ten_1", &s, VALUE), SP_E_INVALID);
        /* No such key in the file: not found, naming the key and the secret. */
        _cleanup_error_ sp_error *e = NULL;
        char *v = NULL;
        size_t n = 0;
        ck_assert_int_eq(cp_envelope_open(a, "sec_1", "ten_1", "k9", s.wrapped.data, s.wrapped.len, s.ciphertext.data,
                                          s.ciphertext.len, &v, &n, &e),
                         -SP_E_NOT_FOUND);
        ck_assert_ptr_nonnull(strstr(e->message, "'k9'"));
        ck_assert_ptr_nonnull(strstr(e->message, "sec_1"));
        ck_assert_ptr_null(v);
        cp_sealed_clear(&s);
}
END_TEST

START_TEST(rewrap_under_a_new_primary)
{
        _cleanup_(cp_keyring_freep) cp_keyring *old = ring("k1 " KEY_A "\n");
        _cleanup_(cp_keyring_freep) cp_keyring *both = ring("# rotated\nk2 " KEY_B "\n\nk1 " KEY_A "\n");
        _cleanup_(cp_keyring_freep) cp_keyring *new_only = ring("k2 " KEY_B "\n");
        ck_assert_str_eq(cp_keyring_primary(both), "k2");
        cp_sealed s;
        seal_ok(old, "sec_1", "ten_1", VALUE, &s);
        /* Both keys in the file: the old one still opens it. */
        ck_assert_int_eq(open_code(both, "sec_1", "ten_1", &s, VALUE), SP_OK);
        ck_assert_int_eq(open_code(new_only, "sec_1", "ten_1", &s, VALUE), SP_E_NOT_FOUND);

        cp_sealed r;
        sp_error *e = NULL;
        sp_test_ok(cp_envelope_rewrap(both, "sec_1", s.key_id, s.wrapped.data, s.wrapped.len, &r, &e), &e);
        ck_assert_str_eq(r.key_id, "k2");
        ck_assert_uint_eq(r.ciphertext.len, 0);
        /* The ciphertext is the same; the data key is now under k2 only. */
        cp_sealed after = {0};
        snprintf(after.key_id, sizeof(after.key_id), "%s", r.key_id);
        after.wrapped = r.wrapped;
        after.ciphertext = s.ciphertext;
        ck_assert_int_eq(open_code(new_only, "sec_1", "ten_1", &after, VALUE), SP_OK);
        ck_assert_int_eq(open_code(old, "sec_1", "ten_1", &after, VALUE), SP_E_NOT_FOUND);
        /* A rewrap bound to another secret, or of changed bytes, fails and makes nothing. */
        _cleanup_error_ sp_error *e2 = NULL, *e3 = NULL;
        cp_sealed x;
        ck_assert_int_eq(cp_envelope_rewrap(both, "sec_2", "k1", s.wrapped.data, s.wrapped.len, &x, &e2),
                         -SP_E_INVALID);
        ck_assert_uint_eq(x.wrapped.len, 0);
        ck_assert_int_eq(cp_envelope_rewrap(new_only, "sec_1", "k1", s.wrapped.data, s.wrapped.len, &x, &e3),
                         -SP_E_NOT_FOUND);
        /* Rewrapping under the key that wraps it: new bytes, same data key. */
        cp_sealed again;
        sp_test_ok(cp_envelope_rewrap(new_only, "sec_1", "k2", r.wrapped.data, r.wrapped.len, &again, &e), &e);
        ck_assert(memcmp(again.wrapped.data, r.wrapped.data, r.wrapped.len) != 0);
        after.wrapped = again.wrapped;
        ck_assert_int_eq(open_code(new_only, "sec_1", "ten_1", &after, VALUE), SP_OK);
        cp_sealed_clear(&again);
        cp_sealed_clear(&r);
        cp_sealed_clear(&s);
}
END_TEST

/* The key file: each bad file fails naming its line, never quoting a key. */
START_TEST(key_file_format)
{
        _cleanup_(cp_keyring_freep) cp_keyring *k =
                ring("  # a comment\r\n\n  k-1.x_Y\t" KEY_A "  \r\nk2 QkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkI\n");
        ck_assert_uint_eq(cp_keyring_count(k), 2);
        ck_assert_str_eq(cp_keyring_primary(k), "k-1.x_Y");
        ck_assert_str_eq(cp_keyring_id_at(k, 1), "k2");
        ck_assert_ptr_null(cp_keyring_id_at(k, 2));
        ck_assert_ptr_nonnull(cp_keyring_key(k, "k2"));
        ck_assert_ptr_null(cp_keyring_key(k, "k3"));
        ck_assert_ptr_null(cp_keyring_path(k));
        ck_assert_int_eq(cp_keyring_refresh(k), 0);

        static const char *const bad[][2] = {
                {"", "no key"},
                {"# only a comment\n\n", "no key"},
                {"k1\n", "line 1"},
                {"k1 " KEY_A "\nk1 " KEY_B "\n", "line 2: key id 'k1' is repeated"},
                {"k1 QUFB\n", "line 1"},
                {"k1 " KEY_A "QUFB\n", "line 1"},
                {"k1 " KEY_A "!\n", "line 1"},
                {"\n\nk/1 " KEY_A "\n", "line 3: a key id"},
                {"k1 " KEY_A " extra\n", "line 1"},
                {"0123456789012345678901234567890123456789012345678901234567890123456789 " KEY_A, "line 1"},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++) {
                cp_keyring *x = NULL;
                _cleanup_error_ sp_error *e = NULL;
                ck_assert_int_eq(cp_keyring_parse(bad[i][0], strlen(bad[i][0]), &x, &e), -SP_E_INVALID);
                ck_assert_ptr_null(x);
                ck_assert_msg(strstr(e->message, bad[i][1]), "%zu: '%s' lacks '%s'", i, e->message, bad[i][1]);
                ck_assert_msg(!strstr(e->message, "QUFB") && !strstr(e->message, "QkJC"), "%zu: a key in '%s'", i,
                              e->message);
        }
        /* At most CP_KEYRING_MAX keys. */
        _cleanup_buf_ sp_buf many = SP_BUF_INIT;
        for (int i = 0; i <= CP_KEYRING_MAX; i++)
                sp_buf_appendf(&many, NULL, "k%d %s\n", i, KEY_C);
        cp_keyring *x = NULL;
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_int_eq(cp_keyring_parse(many.data, many.len, &x, &e), -SP_E_INVALID);
        ck_assert_ptr_nonnull(strstr(e->message, "at most"));
        /* A NUL byte. */
        _cleanup_error_ sp_error *e2 = NULL;
        ck_assert_int_eq(cp_keyring_parse("k1 " KEY_A "\0x", strlen("k1 " KEY_A) + 2, &x, &e2), -SP_E_INVALID);
}
END_TEST

static void write_file(const char *path, const char *text)
{
        /* A new file renamed over the old, as an operator's editor or a
         * secret mount does it: a new inode. */
        char tmp[600];
        snprintf(tmp, sizeof(tmp), "%s.tmp", path);
        FILE *f = fopen(tmp, "w");
        ck_assert_ptr_nonnull(f);
        fputs(text, f);
        fclose(f);
        ck_assert_int_eq(chmod(tmp, 0600), 0);
        ck_assert_int_eq(rename(tmp, path), 0);
}

START_TEST(key_file_read_again_when_it_changes)
{
        _cleanup_free_ char *dir = sp_test_tmpdir("keyring");
        char path[512];
        snprintf(path, sizeof(path), "%s/secrets.keys", dir);
        sp_error *e = NULL;
        cp_keyring *k = NULL;
        ck_assert_int_eq(cp_keyring_load(path, &k, NULL), -SP_E_IO);
        write_file(path, "k1 " KEY_A "\n");
        sp_test_ok(cp_keyring_load(path, &k, &e), &e);
        ck_assert_str_eq(cp_keyring_path(k), path);
        ck_assert_int_eq(cp_keyring_refresh(k), 0);
        cp_sealed s;
        seal_ok(k, "sec_1", "ten_1", VALUE, &s);

        /* A new key on top: the next use sees it, and the old one still opens. */
        write_file(path, "k2 " KEY_B "\nk1 " KEY_A "\n");
        ck_assert_int_eq(cp_keyring_refresh(k), 1);
        ck_assert_str_eq(cp_keyring_primary(k), "k2");
        ck_assert_int_eq(cp_keyring_refresh(k), 0);
        ck_assert_int_eq(open_code(k, "sec_1", "ten_1", &s, VALUE), SP_OK);

        /* A broken file, or none: the keys stay as they were. */
        write_file(path, "k3 not-base64\n");
        ck_assert_int_lt(cp_keyring_refresh(k), 0);
        ck_assert_str_eq(cp_keyring_primary(k), "k2");
        ck_assert_int_eq(cp_keyring_refresh(k), 0); /* the same broken file: said once */
        ck_assert_int_eq(unlink(path), 0);
        ck_assert_int_lt(cp_keyring_refresh(k), 0);
        ck_assert_int_eq(open_code(k, "sec_1", "ten_1", &s, VALUE), SP_OK);

        /* The old key dropped: it no longer opens. */
        write_file(path, "k2 " KEY_B "\n");
        ck_assert_int_eq(cp_keyring_refresh(k), 1);
        ck_assert_uint_eq(cp_keyring_count(k), 1);
        ck_assert_int_eq(open_code(k, "sec_1", "ten_1", &s, VALUE), SP_E_NOT_FOUND);
        cp_sealed_clear(&s);
        cp_keyring_free(k);
        sp_test_tmpdir_remove(dir);
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("envelope");
        TCase *tc = tcase_create("envelope");
        tcase_add_test(tc, round_trip);
        tcase_add_test(tc, bound_to_secret_and_tenant);
        tcase_add_test(tc, changed_bytes_do_not_open);
        tcase_add_test(tc, wrong_or_missing_key);
        tcase_add_test(tc, rewrap_under_a_new_primary);
        suite_add_tcase(s, tc);
        TCase *kf = tcase_create("key file");
        tcase_add_test(kf, key_file_format);
        tcase_add_test(kf, key_file_read_again_when_it_changes);
        suite_add_tcase(s, kf);
        return s;
}

int main(void)
{
        return sp_test_main(suite());
}
