# Sourced by tools/gpu/*.sh. The GPU machine's image lacks the tokenizer's PCRE2 and ICU and the server's cpp-httplib and
# reaches no package mirror, so they travel with the working tree:
#   here, once:   bash tools/gpu/carried_deps.sh pack     -> .fkdeps/ (git-ignored via .git/info/exclude)
#   device run:   pass carry=[".fkdeps"]; sourcing this file points pkg-config and the loader at it.
# .fkdeps is 44 MB and the tree that travels is limited to 64 MiB (the shipped models are 50 MB of it), so `pack`
# also writes .fkdeps.tar.xz (11 MB): carry=[".fkdeps.tar.xz"] instead, and fk_use_deps unpacks it there.
fk_pack_deps() {
  set -e
  local gd; gd=$(git rev-parse --git-dir); mkdir -p "$gd/info"
  grep -qx "/.fkdeps/" "$gd/info/exclude" 2>/dev/null || echo "/.fkdeps/" >> "$gd/info/exclude"
  rm -rf .fkdeps; mkdir -p .fkdeps/include .fkdeps/lib/pkgconfig
  local inc lib icu_inc icu_lib
  inc=$(pkg-config --variable=includedir libpcre2-8); lib=$(pkg-config --variable=libdir libpcre2-8)
  icu_inc=$(pkg-config --variable=includedir icu-uc); icu_lib=$(pkg-config --variable=libdir icu-uc)
  cp -a "$inc/pcre2.h" "$icu_inc/unicode" .fkdeps/include/
  cp -a "$lib"/libpcre2-8.so* "$icu_lib"/libicuuc.so* "$icu_lib"/libicudata.so* .fkdeps/lib/
  local pc='prefix=X\nlibdir=${prefix}/lib\nincludedir=${prefix}/include\nName: %s\nDescription: carried\nVersion: %s\nLibs: -L${libdir} %s\nCflags: -I${includedir}\n'
  printf "$pc" libpcre2-8 "$(pkg-config --modversion libpcre2-8)" "-lpcre2-8" > .fkdeps/lib/pkgconfig/libpcre2-8.pc
  printf "$pc" icu-uc "$(pkg-config --modversion icu-uc)" "-licuuc -licudata" > .fkdeps/lib/pkgconfig/icu-uc.pc
  # cpp-httplib (flashkit serve, bench serve): Debian builds it as a shared library with OpenSSL, zlib and brotli;
  # the .pc file is rewritten without Requires.private so pkg-config needs nothing else on the GPU machine.
  local hl; hl=$(pkg-config --variable=libdir cpp-httplib)
  cp -a "$(pkg-config --variable=includedir cpp-httplib)/httplib.h" .fkdeps/include/
  # httplib.h includes the headers of what Debian built it with (CPPHTTPLIB_{OPENSSL,ZLIB,BROTLI}_SUPPORT).
  local si; si=$(pkg-config --variable=includedir openssl)
  cp -a "$si/openssl" "$(pkg-config --variable=includedir libbrotlidec)/brotli" .fkdeps/include/
  cp -a /usr/include/"$(gcc -dumpmachine)"/openssl/. .fkdeps/include/openssl/
  cp -a "$(pkg-config --variable=includedir zlib)"/zlib.h "$(pkg-config --variable=includedir zlib)"/zconf.h .fkdeps/include/
  cp -a "$hl"/libcpp-httplib.so* .fkdeps/lib/
  local dep; for dep in libssl.so.3 libcrypto.so.3 libbrotlidec.so.1 libbrotlienc.so.1 libbrotlicommon.so.1; do
    cp -aL "$(ldconfig -p | awk -v d="$dep" '$1 == d {print $NF; exit}')" .fkdeps/lib/
  done
  printf "$pc" cpp-httplib "$(pkg-config --modversion cpp-httplib)" "-lcpp-httplib" > .fkdeps/lib/pkgconfig/cpp-httplib.pc
  sed -i "s#^Cflags: .*#Cflags: -I\${includedir} $(pkg-config --cflags-only-other cpp-httplib)#" .fkdeps/lib/pkgconfig/cpp-httplib.pc
  grep -qx "/.fkdeps.tar.xz" "$gd/info/exclude" 2>/dev/null || echo "/.fkdeps.tar.xz" >> "$gd/info/exclude"
  tar cJf .fkdeps.tar.xz .fkdeps
  du -sh .fkdeps .fkdeps.tar.xz
}
fk_use_deps() {
  if [ ! -d .fkdeps/lib/pkgconfig ] && [ -f .fkdeps.tar.xz ]; then tar xJf .fkdeps.tar.xz; fi
  if [ -d .fkdeps/lib/pkgconfig ]; then
    sed -i "s#^prefix=.*#prefix=$PWD/.fkdeps#" .fkdeps/lib/pkgconfig/*.pc
    export PKG_CONFIG_PATH=$PWD/.fkdeps/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
    export LD_LIBRARY_PATH=$PWD/.fkdeps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  fi
}
if [ "${BASH_SOURCE[0]}" = "$0" ] && [ "${1:-}" = pack ]; then cd "$(dirname "$0")/../.." && fk_pack_deps; fi
