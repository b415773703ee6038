/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target: the NFLOG message parser (worker/net/nflog.h) over arbitrary
 * bytes, whole and at every shorter length of the first few hundred. Never
 * crashes or reads past the input; a failure carries an error; what it
 * accepts holds the record's promises (a terminated prefix, ports only for
 * TCP and UDP, addresses only with a family). */
#include <netinet/in.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "net/nflog.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const uint8_t *data, size_t size)
{
        /* An exact-size copy: a read past size is caught by ASan. */
        uint8_t *copy = malloc(size ? size : 1);
        if (!copy)
                abort();
        if (size)
                memcpy(copy, data, size);
        wk_nflog_record r;
        sp_error *e = NULL;
        int rc = wk_nflog_parse(copy, size, &r, &e);
        if (rc < 0) {
                if (!e || !e->message[0])
                        abort();
                sp_error_free(e);
        } else {
                if (rc != 0 || e)
                        abort();
                if (strnlen(r.prefix, sizeof(r.prefix)) == sizeof(r.prefix) || r.indev_name[0])
                        abort();
                if (r.family != 0 && r.family != AF_INET && r.family != AF_INET6)
                        abort();
                if ((r.sport || r.dport) && r.protocol != IPPROTO_TCP && r.protocol != IPPROTO_UDP)
                        abort();
                static const uint8_t zero[16];
                if (r.family == 0 && (r.protocol || r.length || memcmp(&r.saddr, zero, sizeof(zero)) ||
                                      memcmp(&r.daddr, zero, sizeof(zero))))
                        abort();
        }
        /* Without an error to fill, the same answer. */
        wk_nflog_record again;
        if (wk_nflog_parse(copy, size, &again, NULL) != rc)
                abort();
        free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        check(data, size);
        /* Truncations: every bound the parser checks is met at some length. */
        size_t lim = size < 300 ? size : 300;
        for (size_t n = 0; n < lim; n++)
                check(data, n);
        return 0;
}
