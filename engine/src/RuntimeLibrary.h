// NVIDIA libraries the engine loads at run time instead of linking (cuBLASLt: CublasLt.h; CUPTI:
// KernelTrace.h), so installed programs start on machines without them. One place for the
// dlopen of the first soname that loads and for binding entry points by name.
#pragma once

#include <dlfcn.h>

#include <span>
#include <string>
#include <type_traits>

namespace gemma {

// "a, b, c": the sonames as a message lists them.
inline std::string sonameList(std::span<const char* const> sonames) {
    std::string list;
    for (const char* name : sonames) {
        if (!list.empty()) list += ", ";
        list += name;
    }
    return list;
}

// dlopen() (RTLD_NOW | RTLD_LOCAL) of the first soname that loads. A loaded library stays
// loaded for the life of the process (unloading CUDA libraries before exit is not safe).
struct RuntimeLibrary {
    void* handle = nullptr;  // null: none loaded
    std::string soname;      // the one that loaded
    std::string lastError;   // dlerror() of the last attempt when none loaded

    static RuntimeLibrary openFirst(std::span<const char* const> sonames) {
        RuntimeLibrary library;
        for (const char* name : sonames) {
            library.handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
            if (library.handle) {
                library.soname = name;
                return library;
            }
            if (const char* error = dlerror()) library.lastError = error;
        }
        return library;
    }

    // Binds `function` to `symbol`; a required symbol that is absent is added to `missing`
    // ("a, b"), an optional one leaves the pointer null.
    template <typename Function>
    void bind(Function& function, const char* symbol, bool required) {
        function = reinterpret_cast<std::remove_reference_t<Function>>(dlsym(handle, symbol));
        if (!function && required) missing += missing.empty() ? symbol : std::string(", ") + symbol;
    }
    std::string missing;  // required symbols bind() did not find
};

}  // namespace gemma
