package gossip

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
)

// KeySize is the length of the keys NewKey makes: AES-256.
const KeySize = 32

// maxKeyFile bounds (in bytes) what LoadKeys reads: a keyring of a few keys
// is a few hundred bytes, so a bigger file is a mistake (a wrong path).
const maxKeyFile = 64 << 10

// NewKey returns a new random gossip key, base64 encoded: what `ringside
// gossip-key` prints and a key file holds.
func NewKey() (string, error) {
	key := make([]byte, KeySize)
	if _, err := rand.Read(key); err != nil {
		return "", fmt.Errorf("gossip: new key: %w", err)
	}
	return base64.StdEncoding.EncodeToString(key), nil
}

// Fingerprint names a key in logs without revealing it: the first 8 hex
// digits of its SHA-256. A key is 128 to 256 random bits, so 32 bits of a
// hash of it tell nothing that helps guess it.
func Fingerprint(key []byte) string {
	sum := sha256.Sum256(key)
	return hex.EncodeToString(sum[:4])
}

// LoadKey reads the file at path and returns its first key (see LoadKeys).
func LoadKey(path string) ([]byte, error) {
	keys, err := LoadKeys(path)
	if err != nil {
		return nil, err
	}
	return keys[0], nil
}

// LoadKeys reads a gossip keyring from the file at path (see ParseKeys).
func LoadKeys(path string) ([][]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("gossip: read key file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return nil, fmt.Errorf("gossip: read key file: %w", err)
	}
	if len(data) > maxKeyFile {
		return nil, fmt.Errorf("gossip: key file %s is larger than %d bytes: not a key file", path, maxKeyFile)
	}
	keys, err := ParseKeys(data)
	if err != nil {
		return nil, fmt.Errorf("gossip: key file %s: %w", path, err)
	}
	return keys, nil
}

// ParseKeys decodes a gossip keyring: one key per line, each the standard
// base64 of 16, 24 or 32 bytes (what `ringside gossip-key` and `head -c 32
// /dev/urandom | base64` print), blank lines and lines starting with '#'
// ignored. The first key encrypts what this member sends; every key
// decrypts what it receives, which is what lets a job change its key
// without a pod leaving the pool (see Gossip.SetKeys). A repeated key
// counts once. Content that is no such list but exactly 16, 24 or 32 bytes
// long is taken as one raw key. Errors never quote the content.
func ParseKeys(data []byte) ([][]byte, error) {
	keys, lineErr := parseKeyLines(data)
	if lineErr == nil {
		return keys, nil
	}
	if checkKeyLen(len(data)) == nil {
		return [][]byte{bytes.Clone(data)}, nil
	}
	return nil, fmt.Errorf("%w; write one with `ringside gossip-key > FILE`", lineErr)
}

func parseKeyLines(data []byte) ([][]byte, error) {
	var keys [][]byte
	for i, line := range bytes.Split(data, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		key, ok := decodeBase64Key(line)
		if !ok {
			return nil, fmt.Errorf("line %d (%d bytes) is not the base64 of a 16, 24 or 32 byte key", i+1, len(line))
		}
		if !containsKey(keys, key) {
			keys = append(keys, key)
		}
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("holds %d bytes and no key", len(data))
	}
	return keys, nil
}

// DecodeKeys decodes keys given as base64 strings (the --gossip-key flag,
// comma-separated), the first one primary.
func DecodeKeys(texts []string) ([][]byte, error) {
	var keys [][]byte
	for i, t := range texts {
		key, ok := decodeBase64Key([]byte(t))
		if !ok {
			return nil, fmt.Errorf("gossip: key %d of %d (%d characters) is not the base64 of a 16, 24 or 32 byte key", i+1, len(texts), len(t))
		}
		if !containsKey(keys, key) {
			keys = append(keys, key)
		}
	}
	if len(keys) == 0 {
		return nil, errors.New("gossip: no key given")
	}
	return keys, nil
}

func containsKey(keys [][]byte, key []byte) bool {
	for _, k := range keys {
		if bytes.Equal(k, key) {
			return true
		}
	}
	return false
}

// decodeBase64Key decodes text as a base64 key of a valid length.
func decodeBase64Key(text []byte) ([]byte, bool) {
	text = bytes.TrimSpace(text)
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding} {
		key := make([]byte, enc.DecodedLen(len(text)))
		n, err := enc.Decode(key, text)
		if err == nil && checkKeyLen(n) == nil {
			return key[:n], true
		}
	}
	return nil, false
}

// checkKeyLen accepts the AES key sizes memberlist supports.
func checkKeyLen(n int) error {
	switch n {
	case 16, 24, 32:
		return nil
	}
	return fmt.Errorf("%d bytes; want 16, 24 or 32 (AES-128, -192 or -256)", n)
}
