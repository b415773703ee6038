/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Template importers as root: ownership, set-uid bits and file capabilities
 * survive tarball and directory imports, device nodes in a source directory
 * are refused, and the base template (with the real agent) runs a shell and
 * knows its users inside a chroot.
 */
#include <linux/capability.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "../unit/worker/test_template_util.h"
#include "harness.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "template/template.h"

static char *dir;
static char dest[512], src[512], tarball[512];

static char *in(const char *base, const char *rel)
{
        static char buf[8][1024];
        static int i;
        char *b = buf[i++ % 8];
        snprintf(b, sizeof(buf[0]), "%s/%s", base, rel);
        return b;
}

static void setup(void)
{
        dir = sp_test_tmpdir("tpl-root");
        ck_assert_int_eq(chmod(dir, 0755), 0);
        snprintf(dest, sizeof(dest), "%s/dest", dir);
        snprintf(src, sizeof(src), "%s/src", dir);
        snprintf(tarball, sizeof(tarball), "%s/t.tar.gz", dir);
        ck_assert_int_eq(mkdir(dest, 0755), 0);
        ck_assert_int_eq(mkdir(src, 0755), 0);
}

static void teardown(void)
{
        tt_rmrf(dir);
        free(dir);
}

/* A file capability granting CAP_NET_RAW (vfs_cap_data, revision 2). */
static void net_raw_cap(struct vfs_cap_data *cap)
{
        memset(cap, 0, sizeof(*cap));
        cap->magic_etc = VFS_CAP_REVISION_2 | VFS_CAP_FLAGS_EFFECTIVE;
        cap->data[0].permitted = 1u << CAP_NET_RAW;
}

static void owned(struct archive *a, const char *name, unsigned type, unsigned perm, int uid, int gid, const char *data,
                  bool with_xattrs)
{
        struct archive_entry *e = archive_entry_new();
        archive_entry_set_pathname(e, name);
        archive_entry_set_filetype(e, type);
        archive_entry_set_perm(e, perm);
        archive_entry_set_uid(e, uid);
        archive_entry_set_gid(e, gid);
        archive_entry_set_mtime(e, 1650000000, 5);
        if (type == AE_IFLNK)
                archive_entry_set_symlink(e, data);
        archive_entry_set_size(e, type == AE_IFREG && data ? (la_int64_t)strlen(data) : 0);
        if (with_xattrs) {
                struct vfs_cap_data cap;
                net_raw_cap(&cap);
                archive_entry_xattr_add_entry(e, "user.origin", "tarball", 7);
                archive_entry_xattr_add_entry(e, "security.capability", &cap, XATTR_CAPS_SZ_2);
                archive_entry_xattr_add_entry(e, "trusted.ignored", "x", 1);
        }
        ck_assert_int_eq(archive_write_header(a, e), ARCHIVE_OK);
        if (type == AE_IFREG && data)
                ck_assert_int_eq(archive_write_data(a, data, strlen(data)), (la_ssize_t)strlen(data));
        archive_entry_free(e);
}

static void assert_owner(const char *path, uid_t uid, gid_t gid, mode_t perm)
{
        struct stat st;
        ck_assert_msg(lstat(path, &st) == 0, "lstat %s", path);
        ck_assert_msg(st.st_uid == uid && st.st_gid == gid, "%s is owned by %u:%u", path, st.st_uid, st.st_gid);
        if (!S_ISLNK(st.st_mode))
                ck_assert_msg((st.st_mode & 07777) == perm, "%s has mode %o", path, st.st_mode & 07777);
}

START_TEST(tarball_keeps_owners_and_capabilities)
{
        struct archive *a = tt_archive_open(tarball, TT_GZIP);
        owned(a, "srv", AE_IFDIR, 02750, 42, 43, NULL, false);
        owned(a, "srv/ping", AE_IFREG, 04755, 1234, 5678, "binary", true);
        owned(a, "srv/link", AE_IFLNK, 0777, 7, 8, "ping", false);
        tt_archive_close(a);
        sp_error *err = NULL;
        sp_test_ok(wk_template_import_tar(tarball, dest, NULL, NULL, NULL, &err), &err);

        assert_owner(in(dest, "srv"), 42, 43, 02750);
        assert_owner(in(dest, "srv/ping"), 1234, 5678, 04755);
        assert_owner(in(dest, "srv/link"), 7, 8, 0);
        char buf[64];
        ssize_t n = getxattr(in(dest, "srv/ping"), "user.origin", buf, sizeof(buf));
        ck_assert_int_eq(n, 7);
        ck_assert_int_eq(memcmp(buf, "tarball", 7), 0);
        struct vfs_cap_data want, got;
        net_raw_cap(&want);
        n = getxattr(in(dest, "srv/ping"), "security.capability", &got, sizeof(got));
        ck_assert_int_eq(n, XATTR_CAPS_SZ_2);
        ck_assert_int_eq(memcmp(&got, &want, XATTR_CAPS_SZ_2), 0);
        ck_assert_int_lt(getxattr(in(dest, "srv/ping"), "trusted.ignored", buf, sizeof(buf)), 0);
}
END_TEST

START_TEST(directory_keeps_owners_and_refuses_devices)
{
        ck_assert_int_eq(mkdir(in(src, "home"), 0755), 0);
        ck_assert_int_eq(mkdir(in(src, "home/u"), 0700), 0);
        ck_assert_int_eq(chown(in(src, "home/u"), 1000, 1000), 0);
        tt_write(in(src, "home/u/note"), "mine", 0600);
        ck_assert_int_eq(chown(in(src, "home/u/note"), 1000, 1001), 0);
        tt_write(in(src, "suid"), "s", 0755);
        ck_assert_int_eq(chmod(in(src, "suid"), 04755), 0);
        struct vfs_cap_data cap;
        net_raw_cap(&cap);
        ck_assert_int_eq(setxattr(in(src, "suid"), "user.k", "v", 1, 0), 0);
        ck_assert_int_eq(symlink("u", in(src, "home/link")), 0);
        ck_assert_int_eq(lchown(in(src, "home/link"), 5, 6), 0);

        sp_error *err = NULL;
        sp_test_ok(wk_template_import_dir(src, dest, NULL, NULL, NULL, &err), &err);
        assert_owner(in(dest, "home/u"), 1000, 1000, 0700);
        assert_owner(in(dest, "home/u/note"), 1000, 1001, 0600);
        assert_owner(in(dest, "suid"), 0, 0, 04755);
        assert_owner(in(dest, "home/link"), 5, 6, 0);
        char v[8];
        ck_assert_int_eq(getxattr(in(dest, "suid"), "user.k", v, sizeof(v)), 1);

        /* a device node anywhere in the source refuses the import, naming it */
        ck_assert_int_eq(mkdir(in(src, "dev"), 0755), 0);
        ck_assert_int_eq(mknod(in(src, "dev/null"), S_IFCHR | 0666, makedev(1, 3)), 0);
        tt_rmrf(dest);
        ck_assert_int_eq(mkdir(dest, 0755), 0);
        tt_assert_error(wk_template_import_dir(src, dest, NULL, NULL, NULL, &err), err, SP_E_UNSUPPORTED,
                        "'dev/null': device nodes are not allowed");
}
END_TEST

/* Runs a shell command chrooted into dest; returns its output. */
static char *chroot_sh(const char *cmd)
{
        int p[2];
        ck_assert_int_eq(pipe(p), 0);
        pid_t pid = fork();
        if (pid == 0) {
                dup2(p[1], 1);
                dup2(p[1], 2);
                close(p[0]);
                if (chroot(dest) < 0 || chdir("/") < 0)
                        _exit(126);
                char *const argv[] = {"/bin/sh", "-c", (char *)cmd, NULL};
                char *const envp[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL};
                execve(argv[0], argv, envp);
                _exit(127);
        }
        close(p[1]);
        sp_buf out = SP_BUF_INIT;
        char chunk[4096];
        ssize_t n;
        while ((n = read(p[0], chunk, sizeof(chunk))) > 0 && out.len < 65536)
                sp_buf_append(&out, chunk, (size_t)n, NULL);
        close(p[0]);
        int status;
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "'%s' failed: %s", cmd, out.data ? out.data : "");
        return out.data ? sp_buf_steal(&out) : strdup("");
}

START_TEST(base_template_runs_in_a_chroot)
{
        char agent[1024];
        snprintf(agent, sizeof(agent), "%s/bin/space-agent", sp_test_binary_dir());
        ck_assert_msg(access(agent, X_OK) == 0, "%s is missing: build the space-agent target", agent);
        wk_template_meta *meta = NULL;
        sp_error *err = NULL;
        sp_test_ok(wk_template_build_base(&(wk_base_opts){.agent_path = agent}, dest, &meta, &err), &err);
        assert_owner(in(dest, "home/user"), 1000, 1000, 0755);
        assert_owner(in(dest, "sbin/space-agent"), 0, 0, 0755);

        char *out = chroot_sh("echo ok; id -un; id user; cd /home/user && pwd; env | grep -c . >/dev/null; "
                              "test -x /sbin/space-agent && echo agent");
        ck_assert_str_eq(out, "ok\nroot\nuid=1000(user) gid=1000(user) groups=1000(user)\n/home/user\nagent\n");
        free(out);
        out = chroot_sh("/usr/bin/env true && echo env-ok; touch /tmp/x && echo tmp-ok");
        ck_assert_str_eq(out, "env-ok\ntmp-ok\n");
        free(out);
        ck_assert_str_eq(meta->cmd[0], "/bin/sh");
        wk_template_meta_free(meta);
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("worker_template");
        TCase *tc = tcase_create("root");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, tarball_keeps_owners_and_capabilities);
        tcase_add_test(tc, directory_keeps_owners_and_refuses_devices);
        tcase_add_test(tc, base_template_runs_in_a_chroot);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        sp_test_require_root("ownership, device nodes and chroot");
        if (access("/bin/busybox", X_OK) != 0)
                sp_test_skip("needs a static busybox at /bin/busybox (Debian: busybox-static)");
        return sp_test_main(suite());
}
