# Bad input, fuzzing and security tests (see tests/CMakeLists.txt for the helpers).
