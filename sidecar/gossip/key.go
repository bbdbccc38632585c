package gossip

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"os"
)

// LoadKey reads a gossip encryption key from the file at path: either the raw
// 16, 24 or 32 key bytes, or their standard base64 encoding (what
// `head -c 32 /dev/urandom | base64` prints, and what `consul keygen`
// prints), with or without a trailing newline. Base64 is tried first: a random
// binary key is practically never valid base64 of the right length. Text that
// is not the base64 of a key but happens to be 16, 24 or 32 bytes long is
// taken as a raw key.
func LoadKey(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("gossip: read key file: %w", err)
	}
	if key, ok := decodeBase64Key(data); ok {
		return key, nil
	}
	if checkKeyLen(len(data)) == nil {
		return data, nil
	}
	return nil, fmt.Errorf("gossip: key file %s holds %d bytes that are neither a 16, 24 or 32 byte key nor the base64 of one; "+
		"write one with `head -c 32 /dev/urandom | base64 > FILE`", path, len(data))
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
