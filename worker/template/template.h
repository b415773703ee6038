/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Template importers: fill an empty directory with a root filesystem and
 * describe it with metadata.
 *
 * A template is a read-only btrfs subvolume holding a root filesystem plus its
 * metadata (template.json). The storage layer creates the subvolume; the
 * importers here only fill the given, already created, *empty* directory
 * `dest` from one source:
 *
 *   - a directory tree            wk_template_import_dir()
 *   - a rootfs tarball            wk_template_import_tar(), _tar_fd()
 *     (plain, gzip, zstd, xz, bzip2, lz4, lzma: detected from the bytes)
 *   - an OCI image layout         wk_template_import_oci()
 *   - a Debian suite              wk_template_import_debootstrap()
 *   - the built-in `base` tree    wk_template_build_base()
 *
 * Untrusted archives never write outside dest: every entry's path is
 * validated (no absolute paths, no `..`, no empty names) and every file is
 * created from a directory fd on dest without following symlinks
 * (openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS), or an O_NOFOLLOW walk on
 * kernels without it). Symlinks are stored with any target but never written
 * through; existing files are replaced, never opened for writing; device
 * nodes are refused. Sockets in a source directory are skipped (they are
 * meaningless without their process); fifos are recreated. Ownership is
 * preserved only when running as root; otherwise files belong to the caller
 * and set-uid/set-gid bits are dropped. Extended attributes in the user.*
 * namespace and security.capability are kept where the filesystem allows.
 *
 * ON FAILURE dest is left partially filled: the caller removes it (deletes the
 * subvolume). Errors name the offending entry.
 *
 * Thread-safety: the importers share no state; distinct calls may run in
 * parallel on distinct destinations. The debootstrap importer forks.
 */
#ifndef WK_TEMPLATE_H
#define WK_TEMPLATE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "space/buf.h"
#include "space/error.h"

/* ---- metadata ---------------------------------------------------------- */

typedef enum wk_template_source {
        WK_TEMPLATE_SOURCE_DIR = 1,
        WK_TEMPLATE_SOURCE_TAR,
        WK_TEMPLATE_SOURCE_OCI,
        WK_TEMPLATE_SOURCE_DEBOOTSTRAP,
        WK_TEMPLATE_SOURCE_BASE,
} wk_template_source;

#define WK_TEMPLATE_META_MAX_BYTES (1u << 20) /* template.json */
#define WK_TEMPLATE_META_MAX_ITEMS 1024 /* env entries, argv words */
#define WK_TEMPLATE_META_MAX_STRING 32768 /* one env entry or argv word */
#define WK_TEMPLATE_META_MAX_PATH 4096 /* workdir */
#define WK_TEMPLATE_META_MAX_USER 256 /* "name", "uid" or "uid:gid" */
#define WK_TEMPLATE_DIGEST_MAX 72 /* "sha256:" + 64 hex + NUL */

/* The environment every built-in source starts from. */
#define WK_TEMPLATE_DEFAULT_PATH "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

/* What a template's sandboxes start with. The API may override each field per
 * sandbox or command. All strings and vectors are owned by the struct. */
typedef struct wk_template_meta {
        wk_template_source source;
        char **env; /* NULL-terminated "KEY=VALUE" list, never NULL */
        char *workdir; /* absolute path, never NULL */
        char *user; /* "root", a name, "uid" or "uid:gid", never NULL */
        char **cmd; /* default argv, NULL-terminated, never NULL (may be empty) */
        /* "sha256:<hex>" of the source artifact where there is one: the tarball's
         * bytes, the OCI image manifest. "" for directories, debootstrap, base. */
        char digest[WK_TEMPLATE_DIGEST_MAX];
} wk_template_meta;

/* A new metadata value for source: env {WK_TEMPLATE_DEFAULT_PATH}, workdir
 * "/", user "root", no command, no digest. Free with wk_template_meta_free(). */
int wk_template_meta_new(wk_template_source source, wk_template_meta **ret, sp_error **err);
/* Frees m (NULL allowed); returns NULL. */
wk_template_meta *wk_template_meta_free(wk_template_meta *m);
static inline void wk_template_meta_freep(wk_template_meta **m)
{
        *m = wk_template_meta_free(*m);
}
#define _cleanup_template_meta_ __attribute__((cleanup(wk_template_meta_freep)))

/* Checks m the way the parser does (SP_E_INVALID naming the field). */
int wk_template_meta_validate(const wk_template_meta *m, sp_error **err);

/* "dir", "tar", "oci", "debootstrap", "base"; NULL for an unknown value. */
const char *wk_template_source_name(wk_template_source s);
/* The inverse; returns -1 for an unknown name. */
int wk_template_source_parse(const char *name, wk_template_source *ret);

/* Appends the JSON form to out:
 *   {"version":1,"source":"oci","digest":"sha256:…","env":["PATH=…"],
 *    "workdir":"/","user":"root","cmd":["/bin/sh"]}
 * Validates m first. */
int wk_template_meta_to_json(const wk_template_meta *m, sp_buf *out, sp_error **err);
/* Parses and validates exactly len bytes of JSON (untrusted input: bounded,
 * unknown fields rejected, errors name the field). */
int wk_template_meta_parse(const char *json, size_t len, wk_template_meta **ret, sp_error **err);
/* Writes m to path atomically (temporary file, fsync, rename), mode 0644. */
int wk_template_meta_write(const char *path, const wk_template_meta *m, sp_error **err);
/* Reads and parses path (at most WK_TEMPLATE_META_MAX_BYTES). */
int wk_template_meta_read(const char *path, wk_template_meta **ret, sp_error **err);

/* ---- limits and statistics ---------------------------------------------- */

#define WK_TEMPLATE_DEFAULT_MAX_BYTES (UINT64_C(64) << 30)
#define WK_TEMPLATE_DEFAULT_MAX_ENTRIES UINT64_C(2000000)
#define WK_TEMPLATE_DEFAULT_MAX_PATH 4096
#define WK_TEMPLATE_DEFAULT_MAX_DEPTH 256
#define WK_TEMPLATE_DEFAULT_MAX_SECONDS 3600
#define WK_TEMPLATE_DEFAULT_MAX_MEMORY ((size_t)64 << 20)

/* What a template costs on disk, as both the importers' byte bound and
 * wk_template_measure() count it:
 *
 *   every name (directory entry; the root counts as one with an empty name):
 *       WK_TEMPLATE_METADATA_COPIES * (WK_TEMPLATE_ENTRY_OVERHEAD + its length)
 *   every inode, once however many names it has:
 *       its regular file bytes (st_size, or the declared size in an archive)
 *     + WK_TEMPLATE_METADATA_COPIES * (a symlink's target length
 *                                      + each extended attribute's name and
 *                                        value lengths)
 *
 * The overhead stands for an inode item and its directory entries (btrfs: an
 * inode item, a dir item, a dir index and an inode ref, with their item
 * headers: some 300 bytes, rounded up for the tree's slack). Metadata is
 * counted twice because btrfs keeps it twice by default (the DUP profile);
 * file data is kept once. So an archive of empty entries, long symlinks or big
 * extended attributes costs what it really takes from the pool. */
#define WK_TEMPLATE_ENTRY_OVERHEAD 512
#define WK_TEMPLATE_METADATA_COPIES 2

/* Bounds on one import. A zero field means its default. For OCI images the
 * bounds apply to all layers together. max_depth also bounds the file
 * descriptors a directory import holds (two per level). The time bound is
 * checked before every entry and every WK_TEMPLATE_ROOM_STEP bytes of an
 * archive's file (an entry itself is bounded by max_bytes): past it the
 * import fails with SP_E_TIMEOUT. So is cancel (optional): once another
 * thread sets it, the import fails at its next check with SP_E_UNAVAILABLE. */
typedef struct wk_template_limits {
        uint64_t max_bytes; /* what the template costs on disk (see WK_TEMPLATE_ENTRY_OVERHEAD) */
        uint64_t max_entries; /* files, directories, links, whiteouts */
        size_t max_path; /* bytes in one entry's path */
        unsigned max_depth; /* path components */
        unsigned max_seconds; /* wall time of the whole import */
        /* Bytes of the importer's own memory for the paths it keeps (the
         * directories whose modes and times are applied at the end, the paths
         * an OCI layer made): past it the import fails with SP_E_LIMIT. */
        size_t max_memory;
        int64_t deadline_us; /* CLOCK_MONOTONIC (sp_now_mono_us); 0: max_seconds from the import's start */
        const atomic_bool *cancel; /* NULL: none (borrowed) */
        /* Optional: the archive extractor (tarballs, OCI layers) calls it
         * before it writes each WK_TEMPLATE_ROOM_STEP bytes (file data and
         * what entries cost), with an fd on the destination's filesystem and
         * the bytes it is about to write (counted against max_bytes and not
         * written yet, at most a step); < 0 fails the import with its error.
         * For the free space of a filesystem others write to as well, which
         * max_bytes, fixed at the start, cannot follow. On the import's thread. */
        int (*room)(void *room_ud, int fd, uint64_t n, sp_error **err);
        void *room_ud;
} wk_template_limits;

/* How many bytes the extractor writes between two calls of limits->room; the
 * deadline and cancel are checked as often, inside large files too. */
#define WK_TEMPLATE_ROOM_STEP (UINT64_C(4) << 20)

/* What an import did (for logs and tests). */
typedef struct wk_template_stats {
        uint64_t entries; /* entries created or replaced */
        uint64_t bytes; /* bytes of regular files */
        uint64_t cost; /* what the import counted against max_bytes */
        uint64_t reflinked; /* directory import: files cloned with FICLONE */
        uint64_t copied; /* directory import: files copied */
        uint64_t hardlinks; /* hard links made */
        uint64_t skipped; /* sockets and aufs metadata left out */
        uint64_t whiteouts; /* OCI: whiteouts and opaque markers applied */
} wk_template_stats;

/* What the tree under dir costs on disk by the rule above (each name counted,
 * each inode's data, symlink target and extended attributes once however many
 * hard links name it), walking without following symlinks or crossing into
 * other filesystems: what a template holds, whatever its source. For an
 * archive that names no path twice, this is what its importer counted against
 * max_bytes. Errors never name dir. */
int wk_template_measure(const char *dir, uint64_t *ret, sp_error **err);

/* ---- importers ------------------------------------------------------------
 * Common contract: dest is an existing, empty directory (SP_E_CONFLICT
 * otherwise); limits and ret_stats may be NULL; *ret_meta (may be NULL) is set
 * only on success and owned by the caller. On failure the caller removes dest.
 */

/* Copies the tree under the open directory srcfd (see wk_template_import_dir);
 * errors never name srcfd's path. srcfd is not closed. */
int wk_template_import_dir_fd(int srcfd, const char *dest, const wk_template_limits *limits,
                              wk_template_stats *ret_stats, wk_template_meta **ret_meta, sp_error **err);

/* Copies the tree under src (its contents, and the root directory's mode,
 * owner and times) into dest: regular files are reflinked when the
 * filesystems allow (FICLONE), otherwise copied (copy_file_range, then
 * read/write); symlinks are copied as they are and never followed; hard links
 * within src are preserved (copied when linking fails); device nodes are
 * refused (SP_E_UNSUPPORTED naming the path). */
int wk_template_import_dir(const char *src, const char *dest, const wk_template_limits *limits,
                           wk_template_stats *ret_stats, wk_template_meta **ret_meta, sp_error **err);

/* Extracts the tar archive read from fd (a file or a pipe, read to its end)
 * into dest. Plain and compressed archives are detected from the bytes (no
 * external programs are ever run). Errors: SP_E_INVALID for a malformed
 * archive or an unsafe entry (absolute path, `..`, empty name, a hard link out
 * of the tree, a path through a symlink), SP_E_UNSUPPORTED for device nodes,
 * SP_E_TOO_LARGE / SP_E_LIMIT past the limits, SP_E_IO for the filesystem.
 * The metadata's digest is the sha256 of all bytes read from fd. fd is not
 * closed. */
int wk_template_import_tar_fd(int fd, const char *dest, const wk_template_limits *limits, wk_template_stats *ret_stats,
                              wk_template_meta **ret_meta, sp_error **err);
/* wk_template_import_tar_fd() on the file at path. */
int wk_template_import_tar(const char *path, const char *dest, const wk_template_limits *limits,
                           wk_template_stats *ret_stats, wk_template_meta **ret_meta, sp_error **err);

/* Which manifest of a multi-platform image to take; NULL fields default to
 * "linux" and the build host's architecture ("amd64", "arm64", ...). */
typedef struct wk_template_platform {
        const char *os;
        const char *architecture;
        const char *variant; /* optional: only compared when set */
} wk_template_platform;

/* Imports the OCI image layout directory `layout` (oci-layout, index.json,
 * blobs/sha256/…; docker v2 media types accepted): picks the manifest for
 * platform (NULL = the default; the only manifest if there is just one;
 * follows one nested index), checks every blob against its digest and size,
 * applies the layers in order with whiteouts (`.wh.<name>` removes name from
 * lower layers, `.wh..wh..opq` hides the lower contents of its directory)
 * under the same path safety as tarballs, and takes Env, WorkingDir, User and
 * Entrypoint + Cmd from the image config into the metadata, whose digest is
 * the manifest's. A blob that does not match its digest fails with
 * SP_E_INVALID. */
int wk_template_import_oci(const char *layout, const char *dest, const wk_template_platform *platform,
                           const wk_template_limits *limits, wk_template_stats *ret_stats, wk_template_meta **ret_meta,
                           sp_error **err);
/* wk_template_import_oci() on the open layout directory layoutfd; errors
 * never name its path. layoutfd is not closed. */
int wk_template_import_oci_fd(int layoutfd, const char *dest, const wk_template_platform *platform,
                              const wk_template_limits *limits, wk_template_stats *ret_stats,
                              wk_template_meta **ret_meta, sp_error **err);

/* ---- sources confined to an import root --------------------------------- */

/* The one message for a source that cannot be opened under the import root:
 * missing, outside the root, behind a symlink or `..`, of the wrong type or
 * unreadable all read alike, so that nobody learns what the host holds. */
#define WK_TEMPLATE_SOURCE_REFUSED \
        "no importable template source at that path: it must be inside the worker's template import root, " \
        "without symlinks or '..'"

/* Opens the template source `path` beneath the directory `root` (an
 * operator's setting): path is absolute and inside root (root itself, or
 * below it), or relative to root. It is resolved one component at a time
 * beneath root without following any symlink (openat2 RESOLVE_BENEATH |
 * RESOLVE_NO_SYMLINKS, or an O_NOFOLLOW walk), and must name a directory
 * (want_dir) or a regular file. Returns the open fd (O_RDONLY, O_CLOEXEC) or
 * < 0: SP_E_PERMISSION when root is NULL or empty (host-path imports are off),
 * else SP_E_NOT_FOUND with WK_TEMPLATE_SOURCE_REFUSED whatever the cause.
 * Errors never name root or path. */
int wk_template_source_open(const char *root, const char *path, bool want_dir, sp_error **err);

/* ---- debootstrap -------------------------------------------------------- */

#define WK_DEBOOTSTRAP_SUITE_MAX 64
#define WK_DEBOOTSTRAP_MIRROR_MAX 2048
#define WK_DEBOOTSTRAP_PACKAGES_MAX 2048 /* the comma-separated list */
#define WK_DEBOOTSTRAP_USER_MAX 32
#define WK_DEBOOTSTRAP_DEFAULT_TIMEOUT_SEC 3600
#define WK_DEBOOTSTRAP_LOG_MAX (UINT64_C(64) << 20)
#define WK_DEBOOTSTRAP_LINE_MAX 4096

/* Receives each line debootstrap prints (without the newline, truncated to
 * WK_DEBOOTSTRAP_LINE_MAX bytes), on the calling thread. */
typedef void (*wk_debootstrap_progress_fn)(const char *line, void *userdata);

typedef struct wk_debootstrap_opts {
        const char *suite; /* required: [a-z0-9-], e.g. "bookworm" */
        const char *mirror; /* optional: an http:// or https:// URL */
        /* optional: Debian package names, comma-separated, installed once the base system is in place
         * (the new system's apt-get under chroot, with their dependencies, without recommends) */
        const char *packages;
        /* optional: a login user made once the system is in place (useradd -m -s /bin/bash, uid and
         * gid 1000 when free), with passwordless sudo when the system has /etc/sudoers.d */
        const char *user;
        const char *program; /* NULL: "/usr/sbin/debootstrap" */
        const char *log_path; /* optional: the combined output is appended here (bounded) */
        unsigned timeout_sec; /* 0: WK_DEBOOTSTRAP_DEFAULT_TIMEOUT_SEC */
        wk_debootstrap_progress_fn progress; /* optional */
        void *userdata;
        /* Optional: once another thread sets it, debootstrap's process group is
         * killed within a fraction of a second and the import fails with
         * SP_E_UNAVAILABLE (borrowed). */
        const atomic_bool *cancel;
} wk_debootstrap_opts;

/* Validates opts and dest (absolute) and builds the argv
 *   program --variant=minbase <suite> <dest> [<mirror>]
 * as a new NULL-terminated vector (free with sp_strv_freep). SP_E_INVALID
 * naming the field for a bad suite, mirror or dest. */
int wk_debootstrap_argv(const wk_debootstrap_opts *opts, const char *dest, char ***ret, sp_error **err);
/* Whether u may name the user a debootstrap build makes: [a-z_][a-z0-9_-]*, at most
 * WK_DEBOOTSTRAP_USER_MAX characters, not root. */
bool wk_debootstrap_user_ok(const char *u);

/* Runs debootstrap (fork/execve of the argv above, never a shell, in its own
 * process group with a minimal environment) into dest, reporting output lines
 * to opts->progress and to opts->log_path. Needs the network. Fails with
 * SP_E_TIMEOUT (the whole process group killed) past the timeout, and with
 * SP_E_UNAVAILABLE quoting the last output line when debootstrap fails (or
 * naming the cancellation). debootstrap dies with the calling thread
 * (PR_SET_PDEATHSIG): a daemon that exits mid-build leaves no build running.
 * When dest is on a nodev mount (the worker's storage), debootstrap runs in a
 * mount namespace of its own with dest bound over itself, devices allowed
 * (it makes device nodes; needs root). The lines reported and quoted show
 * dest as "<rootfs>". */
int wk_template_import_debootstrap(const wk_debootstrap_opts *opts, const char *dest, wk_template_meta **ret_meta,
                                   sp_error **err);

/* ---- the base template -------------------------------------------------- */

typedef struct wk_base_opts {
        const char *agent_path; /* required: the static space-agent, installed as /sbin/space-agent */
        const char *busybox_path; /* NULL: "/bin/busybox" (a static busybox) */
        const char *bash_path; /* NULL: "/bin/bash-static"; installed as /bin/bash if it exists */
} wk_base_opts;

/* Builds the minimal `base` root filesystem into dest without the network:
 * /bin/busybox with a symlink per applet (`busybox --list`), /bin/sh,
 * /usr/bin/env, optional /bin/bash, /sbin/space-agent, /etc (passwd with root,
 * `user` 1000 with home /home/user, nobody; group; hosts; hostname; an empty
 * resolv.conf), /tmp (1777), /root, /home/user (owned by 1000 when run as
 * root), and empty /proc /sys /dev /run mount points. The metadata keeps user
 * "root" and workdir "/" (the API's defaults; space-e2b acts as `user` in
 * /home/user, as the E2B SDK expects), env PATH and cmd ["/bin/sh"]. */
int wk_template_build_base(const wk_base_opts *opts, const char *dest, wk_template_meta **ret_meta, sp_error **err);

#endif
