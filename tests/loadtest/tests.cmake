# Tests of loadtest/ (see tests/CMakeLists.txt for the helpers).
