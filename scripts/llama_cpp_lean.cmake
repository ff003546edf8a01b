# Included by CMake at every project() call of the llama-cpp-python build
# (CMAKE_PROJECT_INCLUDE, set in the Makefile's probe rule). llama-cpp-python forces
# LLAMA_BUILD_COMMON on, but its Python bindings load only libllama and libggml*
# (and libmtmd, which LLAVA_BUILD=OFF skips): the common library and cpp-httplib
# were 57 of the 140 build steps and over half of the compile time, for nothing
# the wheel uses. Switching it back off after llama-cpp-python's own project()
# runs, before llama.cpp's CMakeLists reads it, drops them (83 steps).
set(LLAMA_BUILD_COMMON OFF CACHE BOOL "llama.cpp: build the common utils library" FORCE)
