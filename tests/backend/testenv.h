// SPDX-License-Identifier: MIT
#pragma once

#include <cstdlib>
#include <string>

// Test data locations: compiled in by CMake, overridable through the environment.
inline std::string testEnv(const char *name, const char *compiled)
{
    const char *v = std::getenv(name);
    return v ? std::string(v) : std::string(compiled);
}
inline std::string fixturesDir()
{
    return testEnv("SHARDSCOPE_FIXTURES", SHARDSCOPE_FIXTURES_DIR);
}
inline std::string picklesDir()
{
    return testEnv("SHARDSCOPE_PICKLES", SHARDSCOPE_PICKLES_DIR);
}
inline std::string pythonExe()
{
    return testEnv("SHARDSCOPE_PYTHON", SHARDSCOPE_PYTHON_EXE);
}
inline std::string toolsDir()
{
    return testEnv("SHARDSCOPE_TOOLS", SHARDSCOPE_TOOLS_DIR);
}
inline std::string tpFixtureDir()
{
    return testEnv("SHARDSCOPE_TP_FIXTURE", SHARDSCOPE_TP_FIXTURE_DIR);
}
