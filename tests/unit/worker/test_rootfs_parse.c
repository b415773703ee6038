/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests: template and sandbox names, the storage layout's paths, and
 * the mountinfo parser. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "rootfs/mountinfo.h"
#include "rootfs/rootfs.h"
#include "space/cleanup.h"

START_TEST(names_valid)
{
        static const char *const ok[] = {
                "base", "sbx_k3v9w0q8e2m5t7z1c4h6", "debian-12", "python3.12", "A_b-C.d", "_x", "0",
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(ok); i++) {
                sp_error *err = NULL;
                ck_assert_msg(wk_rootfs_name_validate("name", ok[i], &err) == 0, "%s refused: %s", ok[i],
                              err ? err->message : "");
        }
        char longest[WK_ROOTFS_NAME_MAX + 1];
        memset(longest, 'a', WK_ROOTFS_NAME_MAX);
        longest[WK_ROOTFS_NAME_MAX] = '\0';
        ck_assert_int_eq(wk_rootfs_name_validate("name", longest, NULL), 0);
}
END_TEST

START_TEST(names_invalid)
{
        static const char *const bad[] = {
                "",        ".",      "..",          "../x",  "a/b",  "/abs",          "a..b",
                ".hidden", "-flag",  "sp ace",      "tab\t", "nl\n", "uml\xc3\xa4ut", "semi;colon",
                "star*",   "quote'", "back\\slash", "x/..",  "x/",
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++) {
                sp_error *err = NULL;
                ck_assert_msg(wk_rootfs_name_validate("sandbox id", bad[i], &err) == -SP_E_INVALID, "accepted \"%s\"",
                              bad[i]);
                ck_assert_ptr_nonnull(err);
                ck_assert_int_eq(err->code, SP_E_INVALID);
                ck_assert_msg(strstr(err->message, "sandbox id"), "message does not name the field: %s", err->message);
                sp_error_free(err);
        }
        char toolong[WK_ROOTFS_NAME_MAX + 2];
        memset(toolong, 'a', WK_ROOTFS_NAME_MAX + 1);
        toolong[WK_ROOTFS_NAME_MAX + 1] = '\0';
        ck_assert_int_eq(wk_rootfs_name_validate("name", toolong, NULL), -SP_E_INVALID);
        ck_assert_int_eq(wk_rootfs_name_validate("name", NULL, NULL), -SP_E_INVALID);
}
END_TEST

START_TEST(layout_paths)
{
        wk_storage st = {.dir = (char *)"/srv/space", .loop_nr = -1};
        _cleanup_free_ char *t = wk_storage_template_rootfs(&st, "base", NULL);
        _cleanup_free_ char *td = wk_storage_template_dir(&st, "base", NULL);
        _cleanup_free_ char *s = wk_storage_sandbox_rootfs(&st, "sbx_1", NULL);
        _cleanup_free_ char *sd = wk_storage_sandbox_dir(&st, "sbx_1", NULL);
        ck_assert_str_eq(t, "/srv/space/templates/base/rootfs");
        ck_assert_str_eq(td, "/srv/space/templates/base");
        ck_assert_str_eq(s, "/srv/space/sandboxes/sbx_1/rootfs");
        ck_assert_str_eq(sd, "/srv/space/sandboxes/sbx_1");

        sp_error *err = NULL;
        ck_assert_ptr_null(wk_storage_sandbox_rootfs(&st, "../templates/base", &err));
        ck_assert_int_eq(err->code, SP_E_INVALID);
        sp_error_free(err);
        ck_assert_ptr_null(wk_storage_template_dir(&st, "..", NULL));
        ck_assert_str_eq(wk_storage_origin_name(WK_STORAGE_IMAGE_REUSED), "reused mounted image");
}
END_TEST

START_TEST(mountinfo_line)
{
        const char *line = "36 25 0:32 / /srv/my\\040storage rw,noatime shared:15 master:2 - btrfs /dev/loop3 "
                           "rw,discard=async,space_cache=v2,subvolid=5,subvol=/\n";
        wk_mountinfo_entry e;
        sp_error *err = NULL;
        sp_test_ok(wk_mountinfo_parse_line(line, strlen(line), &e, &err), &err);
        ck_assert_int_eq(e.mount_id, 36);
        ck_assert_int_eq(e.parent_id, 25);
        ck_assert_uint_eq(e.major, 0);
        ck_assert_uint_eq(e.minor, 32);
        ck_assert_str_eq(e.root, "/");
        ck_assert_str_eq(e.mount_point, "/srv/my storage");
        ck_assert_str_eq(e.mount_options, "rw,noatime");
        ck_assert_str_eq(e.fstype, "btrfs");
        ck_assert_str_eq(e.source, "/dev/loop3");
        ck_assert(wk_mountinfo_has_option(e.super_options, "discard=async"));
        ck_assert(wk_mountinfo_has_option(e.super_options, "rw"));
        ck_assert(!wk_mountinfo_has_option(e.super_options, "discard"));
        ck_assert(!wk_mountinfo_has_option(e.super_options, ""));
        wk_mountinfo_entry_clear(&e);

        /* No optional fields; escapes for tab, newline and backslash. */
        const char *l2 = "1 0 8:1 /a\\011b / rw - ext4 /dev/sda1 rw";
        sp_test_ok(wk_mountinfo_parse_line(l2, strlen(l2), &e, &err), &err);
        ck_assert_str_eq(e.root, "/a\tb");
        ck_assert_uint_eq(e.major, 8);
        ck_assert_str_eq(e.super_options, "rw");
        wk_mountinfo_entry_clear(&e);
        wk_mountinfo_entry_clear(&e); /* safe twice */
}
END_TEST

START_TEST(mountinfo_malformed)
{
        static const char *const bad[] = {
                "",
                "36 25 0:32 / /mnt rw",
                "36 25 0:32 / /mnt rw - btrfs",
                "36 25 0:32 / /mnt rw - btrfs /dev/x rw extra",
                "x 25 0:32 / /mnt rw - btrfs /dev/x rw",
                "36 25 032 / /mnt rw - btrfs /dev/x rw",
                "36 25 0:32:1 / /mnt rw - btrfs /dev/x rw",
                "-1 25 0:32 / /mnt rw - btrfs /dev/x rw",
                "99999999999 25 0:32 / /mnt rw - btrfs /dev/x rw",
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++) {
                wk_mountinfo_entry e = {0};
                sp_error *err = NULL;
                ck_assert_msg(wk_mountinfo_parse_line(bad[i], strlen(bad[i]), &e, &err) < 0, "accepted: %s", bad[i]);
                ck_assert_ptr_nonnull(err);
                sp_error_free(err);
                ck_assert_ptr_null(e.mount_point);
        }
        char nul[] = "1 0 8:1 / /x rw - ext4 /dev/sda1 rw";
        nul[10] = '\0';
        ck_assert_int_lt(wk_mountinfo_parse_line(nul, sizeof(nul) - 1, &(wk_mountinfo_entry){0}, NULL), 0);
        /* An escape cut short stays literal. */
        const char *l = "1 0 8:1 / /x\\04 rw - ext4 /dev/sda1 rw";
        wk_mountinfo_entry e;
        ck_assert_int_eq(wk_mountinfo_parse_line(l, strlen(l), &e, NULL), 0);
        ck_assert_str_eq(e.mount_point, "/x\\04");
        wk_mountinfo_entry_clear(&e);
        /* \000 would cut the path short: it stays literal. */
        const char *z = "1 0 8:1 / /x\\000y rw - ext4 /dev/sda1 rw";
        ck_assert_int_eq(wk_mountinfo_parse_line(z, strlen(z), &e, NULL), 0);
        ck_assert_str_eq(e.mount_point, "/x\\000y");
        wk_mountinfo_entry_clear(&e);
}
END_TEST

struct collect {
        int n;
        char last_point[64];
};

static int collect_cb(const wk_mountinfo_entry *e, void *userdata, sp_error **err)
{
        (void)err;
        struct collect *c = userdata;
        c->n++;
        snprintf(c->last_point, sizeof(c->last_point), "%s", e->mount_point);
        return c->n == 3 ? 7 : 0;
}

START_TEST(mountinfo_whole_file)
{
        const char *text = "1 0 8:1 / / rw - ext4 /dev/sda1 rw\n"
                           "\n"
                           "2 1 0:5 / /proc rw - proc proc rw\n"
                           "3 1 0:6 / /sys rw - sysfs sysfs rw\n"
                           "4 1 0:7 / /dev rw - devtmpfs udev rw\n";
        struct collect c = {0};
        ck_assert_int_eq(wk_mountinfo_parse(text, strlen(text), collect_cb, &c, NULL), 7);
        ck_assert_int_eq(c.n, 3);
        ck_assert_str_eq(c.last_point, "/sys");

        const char *broken = "1 0 8:1 / / rw - ext4 /dev/sda1 rw\nbroken line\n";
        sp_error *err = NULL;
        c.n = 0;
        ck_assert_int_lt(wk_mountinfo_parse(broken, strlen(broken), collect_cb, &c, &err), 0);
        ck_assert_msg(strstr(err->message, "line 2"), "%s", err->message);
        sp_error_free(err);

        /* The real file parses, and "/" is mounted. */
        wk_mountinfo_entry e = {0};
        ck_assert_int_eq(wk_mountinfo_find("/", &e, NULL), 1);
        ck_assert_str_eq(e.mount_point, "/");
        wk_mountinfo_entry_clear(&e);
        ck_assert_int_eq(wk_mountinfo_find("/no/such/mount/point", &e, NULL), 0);
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("rootfs_parse");
        TCase *tc = tcase_create("core");
        tcase_add_test(tc, names_valid);
        tcase_add_test(tc, names_invalid);
        tcase_add_test(tc, layout_paths);
        tcase_add_test(tc, mountinfo_line);
        tcase_add_test(tc, mountinfo_malformed);
        tcase_add_test(tc, mountinfo_whole_file);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        return sp_test_main(suite());
}
