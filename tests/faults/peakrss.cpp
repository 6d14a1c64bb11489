// SPDX-License-Identifier: MIT
// Runs a command and writes its peak resident set size to $PEAKRSS_OUT: "KIB EXITCODE" (exit
// code 128+N for signal N). A small process of its own, so that the figure is the command's:
// Linux keeps the larger of the old and new peak across exec, and a child forked from a test's
// Python (torch imported) would start from hundreds of MiB.
#include <cstdio>
#include <cstdlib>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    const pid_t child = fork();
    if (child == 0) {
        execvp(argv[1], argv + 1);
        _exit(127);
    }
    int status = 0;
    rusage usage{};
    if (child < 0 || wait4(child, &status, 0, &usage) < 0)
        return 2;
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (const char *out = std::getenv("PEAKRSS_OUT")) {
        if (FILE *f = std::fopen(out, "w")) {
            std::fprintf(f, "%ld %d\n", usage.ru_maxrss, code);
            std::fclose(f);
        }
    }
    return code;
}
