/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The built-in `base` template: a static busybox and its applets, the agent,
 * and the few files and directories a sandbox needs, made without the
 * network from binaries on the host.
 */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "space/buf.h"
#include "space/cleanup.h"
#include "space/time.h"
#include "template/internal.h"

#define DEFAULT_BUSYBOX "/bin/busybox"
#define DEFAULT_BASH "/bin/bash-static"
#define APPLET_LIST_MAX (64u << 10)
#define APPLET_NAME_MAX 64
#define APPLET_TIMEOUT_MS 10000
#define BASE_UID 1000

static const struct {
        const char *path;
        mode_t mode;
} base_dirs[] = {
        {"bin", 0755},  {"sbin", 0755},      {"usr", 0755},  {"usr/bin", 0755}, {"usr/sbin", 0755}, {"etc", 0755},
        {"home", 0755}, {"home/user", 0755}, {"root", 0700}, {"tmp", 01777},    {"var", 0755},      {"var/tmp", 01777},
        {"proc", 0555}, {"sys", 0555},       {"dev", 0755},  {"run", 0755},
};

static const struct {
        const char *path;
        const char *content;
} base_files[] = {
        {"etc/passwd", "root:x:0:0:root:/root:/bin/sh\n"
                       "user:x:1000:1000:user:/home/user:/bin/sh\n"
                       "nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"},
        {"etc/group", "root:x:0:\nuser:x:1000:\nnogroup:x:65534:\n"},
        {"etc/hosts", "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"},
        {"etc/hostname", "sandbox\n"},
        {"etc/resolv.conf", ""},
};

/* Fails unless fd is an ELF executable without an interpreter (static), so
 * that it runs in a root filesystem without libraries. */
static int check_static_elf(int fd, const char *path, sp_error **err)
{
        Elf64_Ehdr eh;
        if (pread(fd, &eh, sizeof(eh), 0) != (ssize_t)sizeof(eh) || memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0)
                return sp_error_set(err, SP_E_INVALID, "%s is not an ELF executable", path);
        if (eh.e_ident[EI_CLASS] != ELFCLASS64)
                return 0; /* only 64-bit binaries are inspected further */
        if (eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum > 4096)
                return sp_error_set(err, SP_E_INVALID, "%s is not a usable ELF executable", path);
        for (unsigned i = 0; i < eh.e_phnum; i++) {
                Elf64_Phdr ph;
                if (pread(fd, &ph, sizeof(ph), (off_t)(eh.e_phoff + i * sizeof(ph))) != (ssize_t)sizeof(ph))
                        return sp_error_set(err, SP_E_INVALID, "%s is not a usable ELF executable", path);
                if (ph.p_type == PT_INTERP)
                        return sp_error_set(err, SP_E_INVALID, "%s is not statically linked", path);
        }
        return 0;
}

/* Copies the host file src to name (beneath rootfd) with mode 0755, root-owned. */
static int install(int rootfd, const char *name, const char *src, bool want_static, sp_error **err)
{
        _cleanup_close_ int sfd = open(src, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
        if (sfd < 0)
                return sp_error_set_errno(err, sp_errc_from_errno(errno), errno, "open %s", src);
        struct stat st;
        if (fstat(sfd, &st) < 0 || !S_ISREG(st.st_mode))
                return sp_error_set(err, SP_E_INVALID, "%s is not a regular file", src);
        if (want_static && check_static_elf(sfd, src, err) < 0)
                return -SP_E_INVALID;
        const char *base;
        _cleanup_close_ int pfd = wk__tpl_open_parent(rootfd, name, false, &base);
        if (pfd < 0)
                return sp_error_set_errno(err, SP_E_IO, -pfd, "open parent of /%s", name);
        if (unlinkat(pfd, base, 0) < 0 && errno != ENOENT)
                return sp_error_set_errno(err, SP_E_IO, errno, "replace /%s", name);
        _cleanup_close_ int dfd = openat(pfd, base, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (dfd < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "create /%s", name);
        bool reflinked;
        int r = wk__tpl_copy_data(sfd, dfd, (uint64_t)st.st_size, &reflinked);
        if (r < 0)
                return sp_error_set_errno(err, SP_E_IO, -r, "copy %s to /%s", src, name);
        if (fchmod(dfd, 0755) < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "chmod /%s", name);
        return 0;
}

static int write_file(int rootfd, const char *name, const char *content, sp_error **err)
{
        const char *base;
        _cleanup_close_ int pfd = wk__tpl_open_parent(rootfd, name, false, &base);
        if (pfd < 0)
                return sp_error_set_errno(err, SP_E_IO, -pfd, "open parent of /%s", name);
        _cleanup_close_ int fd = openat(pfd, base, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "create /%s", name);
        size_t n = strlen(content);
        if (write(fd, content, n) != (ssize_t)n || fchmod(fd, 0644) < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "write /%s", name);
        return 0;
}

/* Runs `busybox --list` and appends its output (bounded, in time too) to out. */
static int list_applets(const char *busybox, sp_buf *out, sp_error **err)
{
        int pipefd[2];
        if (pipe2(pipefd, O_CLOEXEC) < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "pipe");
        _cleanup_close_ int rd = pipefd[0];
        _cleanup_close_ int wr = pipefd[1];
        _cleanup_close_ int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (devnull < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "open /dev/null");
        char *const argv[] = {(char *)busybox, "--list", NULL};
        char *const envp[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", NULL};
        pid_t pid = fork();
        if (pid == 0) {
                if (dup2(devnull, 0) < 0 || dup2(wr, 1) < 0 || dup2(devnull, 2) < 0)
                        _exit(126);
                syscall(SYS_close_range, 3u, ~0u, 0u);
                execve(busybox, argv, envp);
                _exit(127);
        }
        if (pid < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "fork");
        _cleanup_pid_ pid_t child = pid;
        wr = sp_close(wr);
        int64_t deadline = sp_now_mono_us() + APPLET_TIMEOUT_MS * 1000;
        for (;;) {
                int64_t left = (deadline - sp_now_mono_us()) / 1000;
                if (left <= 0)
                        return sp_error_set(err, SP_E_TIMEOUT, "%s --list did not finish", busybox);
                struct pollfd pfd = {.fd = rd, .events = POLLIN};
                if (poll(&pfd, 1, (int)left) < 0 && errno != EINTR)
                        return sp_error_set_errno(err, SP_E_IO, errno, "poll");
                if (sp_buf_reserve(out, 4096, err) < 0)
                        return -SP_E_LIMIT;
                ssize_t n = read(rd, out->data + out->len, out->cap - out->len - 1);
                if (n < 0 && (errno == EINTR || errno == EAGAIN))
                        continue;
                if (n < 0)
                        return sp_error_set_errno(err, SP_E_IO, errno, "read %s --list", busybox);
                if (n == 0)
                        break;
                out->len += (size_t)n;
                out->data[out->len] = '\0';
                if (out->len > APPLET_LIST_MAX)
                        return sp_error_set(err, SP_E_TOO_LARGE, "%s --list printed too much", busybox);
        }
        int status;
        pid_t w;
        while ((w = waitpid(pid, &status, 0)) < 0 && errno == EINTR)
                ;
        child = 0;
        if (w != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
                return sp_error_set(err, SP_E_INVALID, "%s --list failed: is it busybox?", busybox);
        return 0;
}

static bool applet_name_ok(const char *s, size_t n)
{
        if (n == 0 || n > APPLET_NAME_MAX || (n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'))
                return false;
        for (size_t i = 0; i < n; i++)
                if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9') ||
                      strchr("._+-[]", s[i])))
                        return false;
        return true;
}

static int link_applets(int bin, const char *busybox, sp_error **err)
{
        _cleanup_buf_ sp_buf list = SP_BUF_INIT;
        if (list_applets(busybox, &list, err) < 0)
                return -SP_E_INVALID;
        const char *p = list.data ? list.data : "";
        size_t count = 0;
        while (*p) {
                size_t n = strcspn(p, "\n");
                char name[APPLET_NAME_MAX + 1];
                if (n > 0 && applet_name_ok(p, n)) {
                        memcpy(name, p, n);
                        name[n] = '\0';
                        if (strcmp(name, "busybox") != 0 && symlinkat("busybox", bin, name) < 0 && errno != EEXIST)
                                return sp_error_set_errno(err, SP_E_IO, errno, "symlink /bin/%s", name);
                        count++;
                }
                p += n;
                if (*p)
                        p++;
        }
        if (count == 0)
                return sp_error_set(err, SP_E_INVALID, "%s --list printed no applets", busybox);
        /* The shell must be there whatever the applet list says. */
        if (symlinkat("busybox", bin, "sh") < 0 && errno != EEXIST)
                return sp_error_set_errno(err, SP_E_IO, errno, "symlink /bin/sh");
        return 0;
}

static int build(int rootfd, const wk_base_opts *opts, sp_error **err)
{
        const char *busybox = opts->busybox_path ? opts->busybox_path : DEFAULT_BUSYBOX;
        const char *bash = opts->bash_path ? opts->bash_path : DEFAULT_BASH;
        bool as_root = geteuid() == 0;
        if (fchmod(rootfd, 0755) < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "chmod /");
        for (size_t i = 0; i < SP_ARRAY_SIZE(base_dirs); i++) {
                if (mkdirat(rootfd, base_dirs[i].path, 0700) < 0 ||
                    fchmodat(rootfd, base_dirs[i].path, base_dirs[i].mode, AT_SYMLINK_NOFOLLOW) < 0)
                        return sp_error_set_errno(err, SP_E_IO, errno, "mkdir /%s", base_dirs[i].path);
        }
        if (as_root && fchownat(rootfd, "home/user", BASE_UID, BASE_UID, AT_SYMLINK_NOFOLLOW) < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "chown /home/user");
        int r;
        if ((r = install(rootfd, "bin/busybox", busybox, true, err)) < 0)
                return r;
        _cleanup_close_ int bin = wk__tpl_open_dir_beneath(rootfd, "bin", O_RDONLY);
        if (bin < 0)
                return sp_error_set_errno(err, SP_E_IO, -bin, "open /bin");
        if ((r = link_applets(bin, busybox, err)) < 0)
                return r;
        if (symlinkat("/bin/busybox", rootfd, "usr/bin/env") < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "symlink /usr/bin/env");
        if (access(bash, X_OK) == 0 && (r = install(rootfd, "bin/bash", bash, true, err)) < 0)
                return r;
        if ((r = install(rootfd, "sbin/space-agent", opts->agent_path, true, err)) < 0)
                return r;
        for (size_t i = 0; i < SP_ARRAY_SIZE(base_files); i++)
                if ((r = write_file(rootfd, base_files[i].path, base_files[i].content, err)) < 0)
                        return r;
        return 0;
}

int wk_template_build_base(const wk_base_opts *opts, const char *dest, wk_template_meta **ret_meta, sp_error **err)
{
        if (!opts || !opts->agent_path)
                return sp_error_set(err, SP_E_INVALID, "the base template needs the agent's path");
        _cleanup_close_ int rootfd = wk__tpl_dest_open(dest, err);
        if (rootfd < 0)
                return rootfd;
        if (build(rootfd, opts, err) < 0)
                return sp_error_wrap(err, "build base template");
        if (ret_meta) {
                _cleanup_template_meta_ wk_template_meta *m = NULL;
                if (wk_template_meta_new(WK_TEMPLATE_SOURCE_BASE, &m, err) < 0)
                        return -SP_E_LIMIT;
                sp_strv_freep(&m->cmd);
                m->cmd = calloc(2, sizeof(char *));
                if (!m->cmd || !(m->cmd[0] = strdup("/bin/sh")))
                        return sp_error_set(err, SP_E_LIMIT, "out of memory");
                *ret_meta = TAKE_PTR(m);
        }
        return 0;
}
