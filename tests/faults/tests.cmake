# Fault tests during load (see tests/CMakeLists.txt for the helpers).
