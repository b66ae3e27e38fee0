// Package portsign makes and checks signed port URLs: a token that lets
// whoever holds it reach one port of one neuron through the API's proxy
// until it expires, without the API's token (nsys-cortex url). The token
// is an HMAC-SHA256, under a key only the host holds, of the neuron, the
// port and the expiry.
package portsign

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Param is the query parameter a signed URL carries its token in; Cookie
// is the cookie the proxy sets from it, so a browser's later requests to
// the same port (its scripts, its styles) carry it too.
const (
	Param  = "cortex_url"
	Cookie = "cortex_port"
)

// MaxExpiry bounds how far ahead a signed URL may expire.
const MaxExpiry = 30 * 24 * time.Hour

// KeySize is the signing key's length in bytes.
const KeySize = 32

// Sign returns the token for the port of neuron id (its instance: see
// Instance) until exp: "EXP.MAC", EXP in Unix seconds, MAC base64url.
// A URL made by an API key carries its name, under the MAC:
// "EXP.MAC~NAME" (by; "" for the operator's), so the daemon can refuse
// it once the key is gone, and count and audit its use as the key's.
func Sign(key []byte, id, instance string, port int, exp time.Time, by string) string {
	e := strconv.FormatInt(exp.Unix(), 10)
	if by == "" {
		return e + "." + base64.RawURLEncoding.EncodeToString(mac(key, id, instance, port, e))
	}
	return e + "." + base64.RawURLEncoding.EncodeToString(mac(key, id, instance+"\nby "+by, port, e)) + "~" + by
}

func mac(key []byte, id, instance string, port int, exp string) []byte {
	h := hmac.New(sha256.New, key)
	fmt.Fprintf(h, "nsys-cortex port url v2\n%s\n%s\n%d\n%s", id, instance, port, exp)
	return h.Sum(nil)
}

// Instance names one neuron of an id, from its directory (dir): the same
// across its runs, another for a neuron made under the id after a wipe,
// so a URL never opens a later neuron that took the id.
func Instance(dir string) (string, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return "", err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "", errors.New("no inode here")
	}
	return fmt.Sprintf("%d:%d:%d", st.Dev, st.Ino, st.Ctim.Sec), nil
}

// Errors of Verify.
var (
	ErrMalformed = errors.New("the signed URL's token is malformed")
	ErrExpired   = errors.New("the signed URL has expired: make a new one with nsys-cortex url")
	ErrWrong     = errors.New("the signed URL is not for this neuron and port, or was not made by this host")
)

// Verify checks token for neuron id's port at now, and returns the name
// of the API key that made it ("" for the operator's).
func Verify(key []byte, id, instance string, port int, token string, now time.Time) (by string, err error) {
	e, m, ok := strings.Cut(token, ".")
	if !ok || len(e) == 0 || len(e) > 12 {
		return "", ErrMalformed
	}
	if m, by, ok = strings.Cut(m, "~"); ok {
		if by == "" || len(by) > 63 || strings.Trim(by, "abcdefghijklmnopqrstuvwxyz0123456789._-") != "" {
			return "", ErrMalformed
		}
		instance += "\nby " + by
	}
	if len(m) > 64 {
		return "", ErrMalformed
	}
	exp, err := strconv.ParseInt(e, 10, 64)
	if err != nil {
		return "", ErrMalformed
	}
	got, err := base64.RawURLEncoding.DecodeString(m)
	if err != nil {
		return "", ErrMalformed
	}
	if len(key) == 0 || !hmac.Equal(got, mac(key, id, instance, port, e)) {
		return "", ErrWrong
	}
	if now.Unix() >= exp {
		return "", ErrExpired
	}
	return by, nil
}

// LoadKey returns the key in file path, making it (KeySize random bytes,
// owner-only) when there is none yet. Two processes making it at once
// agree on one: the file is created whole under a temporary name and
// linked into place, and the loser reads the winner's.
func LoadKey(path string) ([]byte, error) {
	if b, err := os.ReadFile(path); err == nil {
		if len(b) != KeySize {
			return nil, fmt.Errorf("%s: the URL signing key is %d bytes, want %d (remove it to make a new one; URLs signed with it stop working)", path, len(b), KeySize)
		}
		return b, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	key := make([]byte, KeySize)
	rand.Read(key)
	tmp, err := os.CreateTemp(pathDir(path), ".url.key-")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(key)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	if err := os.Link(tmp.Name(), path); errors.Is(err, fs.ErrExist) {
		return LoadKey(path)
	} else if err != nil {
		return nil, err
	}
	return key, nil
}

func pathDir(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[:i+1]
	}
	return "."
}

// URL is the signed URL of neuron id's port until exp, on the
// daemon reached at base (scheme://host[:port]): under domain when there
// is one (<port>-<id>.<domain>, on base's port), else under base's path.
func URL(key []byte, base, domain, id, instance string, port int, exp time.Time, by string) (string, error) {
	u, err := url.Parse(base)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("the daemon's address %q is no URL", base)
	}
	tok := Sign(key, id, instance, port, exp, by)
	q := url.Values{Param: {tok}}.Encode()
	if domain != "" {
		host := fmt.Sprintf("%d-%s.%s", port, strings.ToLower(id), strings.Trim(domain, "."))
		if p := u.Port(); p != "" {
			host = net.JoinHostPort(host, p)
		}
		return u.Scheme + "://" + host + "/?" + q, nil
	}
	return fmt.Sprintf("%s://%s/v1/neurons/%s/ports/%d/?%s", u.Scheme, u.Host, id, port, q), nil
}

// HostSafeID reports whether id can be the id in <port>-<id>.<domain>:
// a host name is matched in lower case, and its labels hold no '.' or '_'.
func HostSafeID(id string) bool {
	return id == strings.ToLower(id) && !strings.ContainsAny(id, "._")
}
