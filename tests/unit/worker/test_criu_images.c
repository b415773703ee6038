/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests: the check of a CRIU mountpoints image (wk_criu_mounts_check,
 * worker/backend/jail_criu.h) that a checkpoint's dump and restore run,
 * because a restore makes the mounts as host root: a jail's own mounts pass
 * (their mount points, and the filesystem types the jail mounts), a mount the
 * sandbox made, a mount point twice, a type the jail does not mount there,
 * and malformed images (bad magic, cut short, a mount point not "/...", a
 * wire type protobuf does not have) are refused, naming the mount. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/jail_criu.h"
#include "harness.h"
#include "space/buf.h"
#include "space/cleanup.h"

static void varint(sp_buf *b, uint64_t v)
{
        do {
                uint8_t c = (uint8_t)(v & 0x7f);
                v >>= 7;
                if (v)
                        c |= 0x80;
                sp_buf_append(b, &c, 1, NULL);
        } while (v);
}

static void u32(sp_buf *b, uint32_t v)
{
        uint8_t t[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
        sp_buf_append(b, t, 4, NULL);
}

static void str(sp_buf *b, unsigned field, const char *s)
{
        varint(b, (uint64_t)field << 3 | 2);
        varint(b, strlen(s));
        sp_buf_append(b, s, strlen(s), NULL);
}

/* One mnt_entry as CRIU writes it (the fields the check reads and some it skips), framed. */
static void entry(sp_buf *img, unsigned fstype, const char *mp)
{
        _cleanup_buf_ sp_buf e = SP_BUF_INIT;
        varint(&e, 1 << 3);
        varint(&e, fstype);
        varint(&e, 2 << 3);
        varint(&e, 77);
        str(&e, 6, "/");
        str(&e, 7, mp);
        str(&e, 8, "none");
        str(&e, 9, "size=64k,uid=0,gid=0");
        u32(img, (uint32_t)e.len);
        sp_buf_append(img, e.data, e.len, NULL);
}

/* A jail's mounts (CRIU's fstype numbers: 1 proc, 2 sysfs, 3 devtmpfs, 5 tmpfs, 6 devpts, 16 auto). */
static void jail_image(sp_buf *img)
{
        u32(img, 0x54564319);
        u32(img, 0x55563928);
        entry(img, 16, "/");
        entry(img, 5, "/dev");
        static const char *const nodes[] = {"null", "zero", "full", "random", "urandom", "tty"};
        for (size_t i = 0; i < 6; i++) {
                char p[32];
                snprintf(p, sizeof(p), "/dev/%s", nodes[i]);
                entry(img, 3, p);
        }
        entry(img, 5, "/dev/shm");
        entry(img, 6, "/dev/pts");
        entry(img, 1, "/proc");
        entry(img, 1, "/proc/sys");
        entry(img, 3, "/proc/kcore");
        entry(img, 2, "/sys");
        entry(img, 5, "/run");
        entry(img, 16, "/run/space/agent");
}

static void expect_refused(const sp_buf *img, const char *words)
{
        sp_error *e = NULL;
        ck_assert_int_lt(wk_criu_mounts_check((const uint8_t *)img->data, img->len, &e), 0);
        ck_assert_ptr_nonnull(e);
        ck_assert_int_eq(e->code, SP_E_INVALID);
        ck_assert_msg(strstr(e->message, words), "%s (wanted: %s)", e->message, words);
        sp_error_free(e);
}

START_TEST(a_jails_mounts_pass)
{
        _cleanup_buf_ sp_buf img = SP_BUF_INIT;
        jail_image(&img);
        sp_error *e = NULL;
        ck_assert_int_eq(wk_criu_mounts_check((const uint8_t *)img.data, img.len, &e), 0);
        ck_assert_ptr_null(e);
}
END_TEST

START_TEST(other_mounts_are_refused)
{
        static const struct {
                unsigned fstype;
                const char *mp, *words;
        } bad[] = {
                {5, "/mnt/own", "tmpfs on /mnt/own"},
                {5, "/run", "tmpfs on /run"}, /* a second mount on a jail's mount point */
                {5, "/dev/pts", "tmpfs on /dev/pts"}, /* a type the jail does not mount there */
                {1, "/proc/self", "proc on /proc/self"},
                {16, "/dev/sda", "other on /dev/sda"},
                {16, "/etc", "other on /etc"},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++) {
                _cleanup_buf_ sp_buf img = SP_BUF_INIT;
                jail_image(&img);
                entry(&img, bad[i].fstype, bad[i].mp);
                expect_refused(&img, bad[i].words);
        }
}
END_TEST

START_TEST(malformed_images_are_refused)
{
        _cleanup_buf_ sp_buf img = SP_BUF_INIT;
        jail_image(&img);
        /* cut short inside its last entry */
        sp_buf cut = {.data = img.data, .len = img.len - 3};
        expect_refused(&cut, "malformed");
        /* another image's magic */
        _cleanup_buf_ sp_buf other = SP_BUF_INIT;
        u32(&other, 0x54564319);
        u32(&other, 0x55474906);
        expect_refused(&other, "not a CRIU mountpoints image");
        /* a mount point that is not absolute */
        _cleanup_buf_ sp_buf abs = SP_BUF_INIT;
        jail_image(&abs);
        entry(&abs, 5, "./tmp");
        expect_refused(&abs, "malformed");
        _cleanup_buf_ sp_buf rel = SP_BUF_INIT;
        jail_image(&rel);
        entry(&rel, 5, ".tmp");
        expect_refused(&rel, "malformed");
        /* wire type 5 (fixed32) is not one CRIU's images use */
        _cleanup_buf_ sp_buf wt = SP_BUF_INIT;
        jail_image(&wt);
        u32(&wt, 5);
        uint8_t fixed[5] = {1 << 3 | 5, 0, 0, 0, 0};
        sp_buf_append(&wt, fixed, 5, NULL);
        expect_refused(&wt, "malformed");
}
END_TEST

int main(void)
{
        Suite *s = suite_create("criu_images");
        TCase *tc = tcase_create("mounts");
        tcase_add_test(tc, a_jails_mounts_pass);
        tcase_add_test(tc, other_mounts_are_refused);
        tcase_add_test(tc, malformed_images_are_refused);
        suite_add_tcase(s, tc);
        return sp_test_main(s);
}
