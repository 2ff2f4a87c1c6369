# gslice_target_defaults(target): warnings (as errors unless GSLICE_WERROR is off) and
# the sanitizers of the sanitize preset.
function(gslice_target_defaults target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow -Wconversion
    -Wno-sign-conversion -Wnon-virtual-dtor -Wformat=2)
  if(GSLICE_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()

if(GSLICE_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()
