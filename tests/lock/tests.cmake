# Tests of lock/ (see tests/CMakeLists.txt for the helpers).
