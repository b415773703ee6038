/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzz target: bytes as a (possibly compressed) tar stream, imported into a
 * fresh directory with small limits — once as a rootfs tarball and once as
 * an OCI layer (whiteouts) — then removed. It must never crash or hang, and
 * nothing may appear next to the destination: after the removal the private
 * scratch directory must be empty again.
 */
#include <archive.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "space/error.h"
#include "template/internal.h"
#include "template/template.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const wk_template_limits limits = {
        .max_bytes = 1u << 20,
        .max_entries = 256,
        .max_path = 256,
        .max_depth = 16,
};

static int scratch = -1; /* a private directory holding only "dest" while an input runs */
static char scratch_path[4000];

static void remove_scratch(void)
{
        wk__tpl_remove_tree(AT_FDCWD, scratch_path, 64);
}

static void ensure_empty(void)
{
        int fd = openat(scratch, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        DIR *d = fdopendir(fd);
        if (!d)
                abort();
        struct dirent *de;
        while ((de = readdir(d)))
                if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
                        abort(); /* something was written outside the destination */
        closedir(d);
}

static int input_fd(const uint8_t *data, size_t size)
{
        int fd = memfd_create("template-tar", MFD_CLOEXEC);
        if (fd < 0)
                abort();
        size_t off = 0;
        while (off < size) {
                ssize_t n = write(fd, data + off, size - off);
                if (n <= 0)
                        abort();
                off += (size_t)n;
        }
        if (lseek(fd, 0, SEEK_SET) != 0)
                abort();
        return fd;
}

static void one_pass(const uint8_t *data, size_t size, bool oci, const char *dest)
{
        if (mkdirat(scratch, "dest", 0755) < 0)
                abort();
        int fd = input_fd(data, size);
        sp_error *err = NULL;
        if (!oci) {
                wk_template_meta *meta = NULL;
                if (wk_template_import_tar_fd(fd, dest, &limits, NULL, &meta, &err) == 0) {
                        if (!meta || err)
                                abort();
                        wk_template_meta_free(meta);
                } else if (!err || meta) {
                        abort();
                }
        } else {
                int root = openat(scratch, "dest", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                wk__tpl_reader *r = malloc(sizeof(*r));
                wk__tpl_extract *x = NULL;
                struct archive *a = NULL;
                if (root < 0 || !r || wk__tpl_reader_init(r, fd, 4u << 20, &err) < 0)
                        abort();
                if (wk__tpl_reader_archive(r, &a, &err) == 0 && wk__tpl_extract_new(root, &limits, true, &x, &err) == 0)
                        wk__tpl_extract_archive(x, r, a, &err);
                wk__tpl_extract_free(x);
                if (a)
                        archive_read_free(a);
                wk__tpl_reader_done(r);
                free(r);
                close(root);
        }
        sp_error_free(err);
        close(fd);
        if (wk__tpl_remove_tree(scratch, "dest", 64) < 0)
                abort();
        ensure_empty();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        static char dest[4096];
        if (scratch < 0) {
                const char *tmp = getenv("TMPDIR");
                snprintf(scratch_path, sizeof(scratch_path), "%s/space-fuzz-template-XXXXXX",
                         tmp && *tmp ? tmp : "/tmp");
                if (!mkdtemp(scratch_path))
                        abort();
                scratch = open(scratch_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (scratch < 0)
                        abort();
                snprintf(dest, sizeof(dest), "%s/dest", scratch_path);
                atexit(remove_scratch);
        }
        one_pass(data, size, false, dest);
        one_pass(data, size, true, dest);
        return 0;
}
