/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzz target: a line of the gateway's control protocol (gateway/ctl/msg.h)
 * and the egress profile it may carry (gateway/policy/profile.h), as the
 * gateway reads them. Beyond not crashing: a profile that parses prints to
 * a normal form that parses again to the same normal form, and what it
 * allows is never a forbidden address. The credential bindings it may carry
 * (gateway/policy/secret.h): what parses has a placeholder of the right
 * form, a header and a value that cannot end a header line, and parses
 * again from its stripped copy (values kept from the first).
 */
#include <stdint.h>
#include <string.h>

#include "ctl/msg.h"
#include "policy/profile.h"
#include "policy/secret.h"
#include "space/json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        json_object *o = NULL;
        if (sp_json_parse((const char *)data, size, &o, NULL) < 0)
                return 0;
        gw_ctl_req r;
        json_object *profile = o;
        if (gw_ctl_req_decode(o, &r, NULL) == 0 && r.profile)
                profile = r.profile;
        json_object *secrets = o;
        if (gw_ctl_req_decode(o, &r, NULL) == 0 && r.secrets)
                secrets = r.secrets;
        gw_secrets *s = NULL;
        if (gw_secrets_parse(secrets, &s, NULL) == 0 && s) {
                size_t without = 0;
                for (size_t i = 0; i < gw_secrets_count(s); i++) {
                        const gw_secret *b = gw_secrets_at(s, i);
                        without += !b->value;
                        if (!gw_secret_is_placeholder(b->placeholder, strlen(b->placeholder)) || !b->header[0] ||
                            (b->value &&
                             (memchr(b->value, '\r', b->value_len) || memchr(b->value, '\n', b->value_len))))
                                __builtin_trap();
                }
                json_object *stripped = gw_secrets_strip_values(secrets);
                gw_secrets *t = NULL;
                if (gw_secrets_parse(stripped, &t, NULL) < 0 || gw_secrets_keep_values(t, s) != without)
                        __builtin_trap();
                gw_secrets_unref(t);
                json_object_put(stripped);
        }
        gw_secrets_unref(s);
        gw_profile *p = NULL;
        if (gw_profile_resolve(profile, true, &p, NULL) == 0) {
                if (!gw_profile_builtin(gw_profile_name(p))) {
                        json_object *j = gw_profile_to_json(p);
                        gw_profile *q = NULL;
                        if (gw_profile_parse(j, NULL, true, &q, NULL) < 0)
                                __builtin_trap();
                        json_object *k = gw_profile_to_json(q);
                        if (strcmp(json_object_to_json_string(j), json_object_to_json_string(k)) != 0)
                                __builtin_trap();
                        json_object_put(k);
                        json_object_put(j);
                        gw_profile_unref(q);
                }
                static const uint32_t forbidden[] = {0x7f000001, 0xa9fea9fe, 0x00000000, 0xe0000001, 0xffffffff};
                for (size_t i = 0; i < sizeof(forbidden) / sizeof(forbidden[0]); i++)
                        if (gw_profile_allows_addr(p, forbidden[i], gw_addr_classify(forbidden[i])))
                                __builtin_trap();
                gw_profile_unref(p);
        }
        json_object_put(o);
        return 0;
}
