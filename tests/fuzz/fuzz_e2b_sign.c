/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzz target: space-e2b's signed file URLs (compat/e2b/sign.h). The input
 * is up to five lines: signature_expiration, path, user, signature, token.
 * The expiration parses to a 64-bit integer that prints back to the same
 * number, or fails with SP_E_INVALID. A signers table holding the token
 * finds it for a signature computed over the input's fields, for that
 * sandbox and no other, and refuses that signature with one character
 * changed; the input's own signature is accepted only if it is that one.
 * The whole input is also a Host header (e2b_host_sandbox): what it names,
 * if anything, is a valid sandbox id found in it after "<digits>-".
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "call.h"
#include "sign.h"
#include "space/id.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NOW INT64_C(1700000000)

static int check(e2b_signers *t, const char *sandbox, const char *path, const char *user, const char *sig,
                 const char *exp, sp_errc *ret_code)
{
        sp_error *e = NULL;
        char *sbx = NULL, *tok = NULL;
        int r = e2b_signers_check(t, sandbox, path, "read", user, sig, exp, NOW, &sbx, &tok, &e);
        if ((r == 0) != (e == NULL) || (r == 0) != (tok != NULL) || (r == 0) != (sbx != NULL))
                abort();
        *ret_code = e ? e->code : SP_OK;
        sp_error_free(e);
        free(sbx);
        free(tok);
        return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size > 4096)
                return 0;
        char *text = malloc(size + 1);
        if (!text)
                return 0;
        memcpy(text, data, size);
        text[size] = '\0';
        char *named = e2b_host_sandbox(text);
        if (named && (!sp_id_valid(named, "sbx") || !strstr(text, named) || !strchr(text, '-')))
                abort();
        free(named);
        char *f[5] = {"", "", "", "", "e2b1.token"};
        char *p = text;
        for (size_t i = 0; i < 5 && p; i++) {
                f[i] = p;
                if ((p = strchr(p, '\n')))
                        *p++ = '\0';
        }
        const char *exp_text = f[0], *path = f[1], *user = f[2], *sig = f[3], *token = *f[4] ? f[4] : "e2b1.token";

        int64_t exp = 0;
        sp_error *e = NULL;
        if (e2b_sign_expiration(exp_text, &exp, &e) == 0) {
                char back[32];
                int64_t again = 1;
                snprintf(back, sizeof(back), "%" PRId64, exp);
                if (e || e2b_sign_expiration(back, &again, NULL) < 0 || again != exp)
                        abort();
        } else if (!e || e->code != SP_E_INVALID) {
                abort();
        }
        int exp_ok = e == NULL;
        sp_error_free(e);

        e2b_signers *t = e2b_signers_new(4, 2);
        if (!t)
                abort();
        e2b_signers_remember(t, "sbx_fuzz", token, path);
        int known = strlen(token) <= 1024;
        char want[E2B_SIGN_LEN + 1];
        e2b_sign_compute(path, "read", user, token, exp_ok ? &exp : NULL, want);
        if (strlen(want) != E2B_SIGN_LEN || strncmp(want, "v1_", 3) != 0)
                abort();
        const char *exp_q = exp_ok ? exp_text : NULL;
        sp_errc code;
        int r = check(t, NULL, path, user, want, exp_q, &code);
        if (known && (r == 0) != (!exp_q || exp >= NOW))
                abort();
        if (r < 0 && code != SP_E_UNAUTHENTICATED)
                abort();
        if (check(t, "sbx_other", path, user, want, exp_q, &code) == 0)
                abort();
        want[3 + (size % (E2B_SIGN_LEN - 3))] ^= 0x01;
        if (check(t, NULL, path, user, want, exp_q, &code) == 0)
                abort();
        want[3 + (size % (E2B_SIGN_LEN - 3))] ^= 0x01;
        /* The input's own signature: accepted only when it is the right one. */
        if (check(t, NULL, path, user, sig, exp_text, &code) == 0 && (strcmp(sig, want) != 0 || !exp_ok))
                abort();
        e2b_signers_free(t);
        free(text);
        return 0;
}
