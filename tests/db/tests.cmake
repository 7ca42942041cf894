# Tests of db/ (see tests/CMakeLists.txt for the helpers).
