#include "common/crypto.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <stdexcept>

namespace rc::crypto {

Digest hmac_sha256(std::span<const uint8_t> key, std::span<const uint8_t> data) {
  Digest out{};
  unsigned int len = 0;
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), data.data(), data.size(), out.data(), &len) ==
          nullptr ||
      len != out.size())
    throw std::runtime_error("HMAC-SHA256 failed in libcrypto");
  return out;
}

void random_bytes(std::span<uint8_t> out) {
  if (RAND_bytes(out.data(), static_cast<int>(out.size())) != 1)
    throw std::runtime_error("the system random number generator failed");
}

bool equal(std::span<const uint8_t> a, std::span<const uint8_t> b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string base64url_encode(std::span<const uint8_t> data) {
  std::string out(4 * ((data.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()), data.data(), static_cast<int>(data.size()));
  out.resize(static_cast<std::size_t>(n));
  while (!out.empty() && out.back() == '=') out.pop_back();
  for (char& c : out) c = c == '+' ? '-' : c == '/' ? '_' : c;
  return out;
}

namespace {

bool base64_letter_or_digit(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

}  // namespace

std::optional<std::vector<uint8_t>> base64url_decode(std::string_view text) {
  while (!text.empty() && text.back() == '=') text.remove_suffix(1);
  if (text.size() % 4 == 1) return std::nullopt;
  std::string standard(text);
  // Only the url alphabet (padding only at the end, removed above). Checked here rather than left
  // to EVP_DecodeBlock, which skips whitespace at either end of its input: it would accept a
  // capability with spaces or newlines around it, or not, depending on their count.
  for (char& c : standard) {
    if (c == '-') c = '+';
    else if (c == '_') c = '/';
    else if (!base64_letter_or_digit(c)) return std::nullopt;
  }
  const std::size_t pad = (4 - standard.size() % 4) % 4;
  standard.append(pad, '=');
  std::vector<uint8_t> out(3 * standard.size() / 4 + 1);
  // EVP_DecodeBlock rejects characters outside the alphabet but counts padding as zero bytes.
  const int n = EVP_DecodeBlock(out.data(), reinterpret_cast<const unsigned char*>(standard.data()),
                                static_cast<int>(standard.size()));
  if (n < 0 || static_cast<std::size_t>(n) < pad) return std::nullopt;
  out.resize(static_cast<std::size_t>(n) - pad);
  return out;
}

void release_thread_state() { OPENSSL_thread_stop(); }

}  // namespace rc::crypto
