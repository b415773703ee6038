/* SPDX-License-Identifier: Apache-2.0 */
/* The cluster CA: one row in cluster_ca, created by whichever replica gets there first. */
#include <string.h>

#include "fleet/fleet_internal.h"
#include "space/cleanup.h"

#define CA_NAME "space cluster CA"
#define CA_DAYS SP_PKI_MAX_DAYS

static int load(cp_db *db, sp_pki_ca **ret, bool *ret_found, sp_error **err)
{
        _cleanup_pgresult_ PGresult *res = NULL;
        if (cp_db_exec(db, "SELECT cert_pem, key_pem FROM cluster_ca WHERE id = 1", 0, NULL, &res, err) < 0)
                return sp_error_wrap(err, "cluster CA");
        *ret_found = PQntuples(res) == 1;
        if (!*ret_found)
                return 0;
        char *key = PQgetvalue(res, 0, 1);
        int r = sp_pki_ca_load(PQgetvalue(res, 0, 0), key, ret, err);
        sp_explicit_bzero(key, strlen(key));
        return r < 0 ? sp_error_wrap(err, "cluster CA in the database") : 0;
}

int cp_fleet_cluster_ca(cp_db *db, sp_pki_ca **ret, sp_error **err)
{
        bool found = false;
        int r = load(db, ret, &found, err);
        if (r < 0 || found)
                return r;
        _cleanup_pki_ca_ sp_pki_ca *ca = NULL;
        if (sp_pki_ca_create(CA_NAME, CA_DAYS, &ca, err) < 0)
                return sp_error_wrap(err, "create the cluster CA");
        _cleanup_free_ char *cert = sp_pki_ca_cert_pem(ca, err);
        _cleanup_free_ char *key = cert ? sp_pki_ca_key_pem(ca, err) : NULL;
        if (!key)
                return sp_error_wrap(err, "create the cluster CA");
        const char *params[] = {cert, key};
        /* Another replica may have inserted its CA meanwhile: keep that one. */
        r = cp_db_exec(db,
                       "INSERT INTO cluster_ca (id, cert_pem, key_pem) VALUES (1, $1, $2) "
                       "ON CONFLICT (id) DO NOTHING",
                       2, params, NULL, err);
        sp_explicit_bzero(key, strlen(key));
        if (r < 0)
                return sp_error_wrap(err, "store the cluster CA");
        if ((r = load(db, ret, &found, err)) < 0)
                return r;
        if (!found)
                return sp_error_set(err, SP_E_INTERNAL, "cluster CA: stored but not found");
        return 0;
}
