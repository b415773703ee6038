/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Replays a fuzz target's corpus in a normal (non-libFuzzer) build: every
 * file under the directories or files named on the command line is fed to
 * LLVMFuzzerTestOneInput once. Fails if nothing was replayed.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path)
{
        FILE *f = fopen(path, "rb");
        if (!f) {
                perror(path);
                return -1;
        }
        fseek(f, 0, SEEK_END);
        long n = ftell(f);
        fseek(f, 0, SEEK_SET);
        uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
        if (!buf || (n > 0 && fread(buf, 1, (size_t)n, f) != (size_t)n)) {
                fclose(f);
                free(buf);
                return -1;
        }
        fclose(f);
        /* Copy to an exact-size block so ASan catches reads past the input. */
        uint8_t *exact = malloc(n > 0 ? (size_t)n : 1);
        memcpy(exact, buf, (size_t)n);
        free(buf);
        LLVMFuzzerTestOneInput(exact, (size_t)n);
        free(exact);
        return 0;
}

static int replay(const char *path, int *count)
{
        struct stat st;
        if (stat(path, &st) < 0) {
                perror(path);
                return -1;
        }
        if (!S_ISDIR(st.st_mode)) {
                if (replay_file(path) < 0)
                        return -1;
                (*count)++;
                return 0;
        }
        struct dirent **names;
        int n = scandir(path, &names, NULL, alphasort);
        if (n < 0) {
                perror(path);
                return -1;
        }
        int r = 0;
        for (int i = 0; i < n; i++) {
                if (names[i]->d_name[0] != '.' && r == 0) {
                        char sub[4096];
                        snprintf(sub, sizeof(sub), "%s/%s", path, names[i]->d_name);
                        r = replay(sub, count);
                }
                free(names[i]);
        }
        free(names);
        return r;
}

int main(int argc, char **argv)
{
        int count = 0;
        for (int i = 1; i < argc; i++)
                if (replay(argv[i], &count) < 0)
                        return 1;
        if (count == 0) {
                fprintf(stderr, "no corpus inputs replayed\n");
                return 1;
        }
        printf("replayed %d inputs\n", count);
        return 0;
}
