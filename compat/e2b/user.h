/* SPDX-License-Identifier: Apache-2.0 */
/*
 * E2B's default user in a sandbox.
 *
 * envd acts as `user` when the SDK names no user, and every E2B template has
 * it (E2B's template build runs `useradd -m -s /bin/bash user`, gives it
 * /home/user and passwordless sudo). Ours may not: an imported image or a
 * debootstrap has only root. So when the wrapper creates or connects a
 * sandbox it makes sure `user` and its home are there, and makes them when
 * they are not (as root, with a POSIX sh script in the sandbox): `user` gets
 * the first uid and gid from 1000 that the sandbox's /etc/passwd and
 * /etc/group do not use, the home /home/user (with /etc/skel's files when
 * there is one), /bin/bash as its shell when the sandbox has it (else
 * /bin/sh), and, only when the sandbox has sudo (/etc/sudoers.d), sudo
 * without a password, as in E2B. A sandbox whose `user` exists is not
 * changed, nor is its sudo configuration.
 *
 * Runs on a call's thread (blocking calls to the API and the data plane).
 */
#ifndef E2B_USER_H
#define E2B_USER_H

#include "api.h"

/* Makes sure the running sandbox sandbox_id has E2B's default user with its
 * home: one stat as that user when it has, else the script as root, waited
 * for (killed after E2B_USER_TIMEOUT_S). Errors: the API's (the
 * sandbox is not running, ...), SP_E_PRECONDITION when the script failed
 * (no /bin/sh, a read-only /etc; the message carries its output). */
int e2b_user_ensure(e2b_api *a, const char *sandbox_id, sp_error **err);

#define E2B_USER_TIMEOUT_S 30

#endif
