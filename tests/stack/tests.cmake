# Tests of stack/ (see tests/CMakeLists.txt for the helpers).
