# Tests of service/ (see tests/CMakeLists.txt for the helpers).
