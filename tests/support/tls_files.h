// Files a TLS test needs, made with the openssl command in a folder of the test's own
// (removed with it): ca.pem, a CA; server.pem and server.key, a certificate for 127.0.0.1
// signed by it and its key; other.pem and other.key, a certificate of another CA; token and
// wrong, a token and one that differs from it in the last character (mode 0600). ok() says
// whether openssl made them.
#pragma once

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace gslice::test {

class TlsFiles {
 public:
  explicit TlsFiles(const std::string& tag = "tls") : dir_("/tmp/gslice-test-" + std::to_string(getpid()) + "-" + tag) {
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directory(dir_);
    // Without the sanitize build's preloaded runtime: openssl is not built with it.
    const std::string q = "cd " + dir_ + " && unset LD_PRELOAD && ";
    const std::string ec = " -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes";
    ok_ = system((q + "openssl req -x509" + ec + " -keyout ca.key -out ca.pem -days 1 -subj /CN=gslice-test-ca"
                      " 2>/dev/null && openssl req" + ec + " -keyout server.key -out server.csr -subj /CN=gslice-test"
                      " 2>/dev/null && printf 'subjectAltName=IP:127.0.0.1\\n' > ext && openssl x509 -req -in server.csr"
                      " -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 1 -extfile ext 2>/dev/null && "
                      "openssl req -x509" + ec + " -keyout other.key -out other.pem -days 1 -subj /CN=other 2>/dev/null")
                         .c_str()) == 0;
    Write("token", "0123456789abcdef0123456789abcdef\n");
    Write("wrong", "0123456789abcdef0123456789abcdeX\n");
  }
  ~TlsFiles() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  bool ok() const { return ok_; }
  std::string operator()(const std::string& name) const { return dir_ + "/" + name; }

 private:
  void Write(const std::string& name, const std::string& text) {
    std::ofstream((*this)(name)) << text;
    chmod((*this)(name).c_str(), 0600);
  }
  std::string dir_;
  bool ok_ = false;
};

}  // namespace gslice::test
