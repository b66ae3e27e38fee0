package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// entry is one name of the file with its raw JSON value.
type entry struct {
	name string
	raw  json.RawMessage
	line int
}

// readFile reads path as a flat JSON object, in file order. A missing or
// blank file has no entries. Malformed JSON, a value that is not an
// object and a name given twice fail with the file and position.
func readFile(path string) ([]entry, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the configuration: %w", err)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	syntax := func(err error) error {
		off := dec.InputOffset()
		var se *json.SyntaxError
		if errors.As(err, &se) {
			off = se.Offset
		} else if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			off, err = int64(len(data)), errors.New("unexpected end of file")
		}
		line, col := position(data, off)
		return fmt.Errorf("%s:%d:%d: malformed JSON: %v", path, line, col, err)
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, syntax(err)
	}
	if tok != json.Delim('{') {
		line, col := position(data, dec.InputOffset())
		return nil, fmt.Errorf(`%s:%d:%d: want a JSON object of settings, like {"api.listen": "127.0.0.1:3100"}`, path, line, col)
	}
	var entries []entry
	seen := map[string]int{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, syntax(err)
		}
		name, _ := tok.(string) // inside an object, Token returns only string names
		line, _ := position(data, dec.InputOffset())
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, syntax(err)
		}
		if first, dup := seen[name]; dup {
			return nil, fmt.Errorf("%s:%d: %q is given twice (first on line %d)", path, line, name, first)
		}
		seen[name] = line
		entries = append(entries, entry{name: name, raw: raw, line: line})
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, syntax(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		line, col := position(data, dec.InputOffset())
		if err != nil {
			return nil, syntax(err)
		}
		return nil, fmt.Errorf("%s:%d:%d: malformed JSON: more after the closing brace", path, line, col)
	}
	return entries, nil
}

// position turns a byte offset of data into a line and column, from 1.
func position(data []byte, off int64) (line, col int) {
	off = min(max(off, 0), int64(len(data)))
	before := data[:off]
	line = bytes.Count(before, []byte("\n")) + 1
	col = int(off) - (bytes.LastIndexByte(before, '\n') + 1) + 1
	return line, col
}

// decodeValue checks the JSON value of k from the file and returns it
// parsed: booleans are JSON booleans, whole numbers JSON numbers, sizes
// strings ("1g") or numbers of bytes, everything else strings.
func decodeValue(k Key, raw json.RawMessage) (string, error) {
	got := string(raw)
	if len(got) > 40 {
		got = got[:37] + "..."
	}
	wrong := func() error {
		return fmt.Errorf("want %s (a JSON %s), got %s", k.Form(), jsonKind(k.Type), got)
	}
	var s string
	switch {
	case bytes.Equal(raw, []byte("null")):
		return "", fmt.Errorf("null is not a value; remove the entry (nsys-cortex config unset %s) to get the default", k.Name)
	case k.Type == TypeBool:
		var b bool
		if json.Unmarshal(raw, &b) != nil {
			return "", wrong()
		}
		s = strconv.FormatBool(b)
	case k.Type == TypeInt || k.Type == TypeBytes && raw[0] != '"':
		var n json.Number // which would take "3" too: a quoted number is the wrong type
		if raw[0] == '"' || json.Unmarshal(raw, &n) != nil {
			return "", wrong()
		}
		s = n.String()
	default:
		if json.Unmarshal(raw, &s) != nil {
			return "", wrong()
		}
	}
	v, err := k.parse(s)
	if err != nil {
		if k.check != nil {
			return "", err
		}
		return "", wrong()
	}
	return v, nil
}

// jsonKind names the JSON type a key's values are written as.
func jsonKind(t Type) string {
	switch t {
	case TypeBool:
		return "boolean"
	case TypeInt:
		return "number"
	case TypeBytes:
		return "string or number"
	}
	return "string"
}

// encodeValue is the JSON of v, a parsed value of k, in the file.
func encodeValue(k Key, v string) json.RawMessage {
	switch k.Type {
	case TypeBool, TypeInt:
		return json.RawMessage(v)
	}
	b, _ := json.Marshal(v) // a string always marshals
	return b
}

// Set checks value as the value of the key called name and writes it to
// the configuration file at path, keeping its other entries. The file is
// replaced atomically and has mode 0600 (it may hold api.token); its
// directory is made (0700) when missing.
func Set(path, name, value string) error {
	k, err := Lookup(name)
	if err != nil {
		return err
	}
	v, err := k.parse(value)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	entries, err := readFile(path)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(entries, func(e entry) bool { return e.name == name })
	if i < 0 {
		entries = append(entries, entry{name: name})
		i = len(entries) - 1
	}
	entries[i].raw = encodeValue(k, v)
	return writeFile(path, entries)
}

// Unset removes the key called name from the configuration file at path
// and reports whether it was there. Names no longer in the schema may be
// removed too, so a file that Load rejects for one can be mended.
func Unset(path, name string) (removed bool, err error) {
	entries, err := readFile(path)
	if err != nil {
		return false, err
	}
	i := slices.IndexFunc(entries, func(e entry) bool { return e.name == name })
	if i < 0 {
		if _, err := Lookup(name); err != nil {
			return false, err
		}
		return false, nil
	}
	return true, writeFile(path, slices.Delete(entries, i, i+1))
}

// writeFile replaces path with entries, sorted by name, through a
// temporary file in the same directory, so a reader sees the old file or
// the new one and never a part.
func writeFile(path string, entries []entry) (err error) {
	slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.name, b.name) })
	var buf bytes.Buffer
	buf.WriteString("{")
	for i, e := range entries {
		if i > 0 {
			buf.WriteString(",")
		}
		name, _ := json.Marshal(e.name) // a string always marshals
		var val bytes.Buffer
		if err := json.Indent(&val, e.raw, "  ", "  "); err != nil {
			return fmt.Errorf("%s: %s: %w", path, e.name, err)
		}
		fmt.Fprintf(&buf, "\n  %s: %s", name, val.Bytes())
	}
	buf.WriteString("\n}\n")

	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("writing the configuration: %w", err)
	}
	f, err := os.CreateTemp(dir, ".config-*.json.tmp")
	if err != nil {
		return fmt.Errorf("writing the configuration: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()           // the write already failed; this error adds nothing
			os.Remove(f.Name()) // best effort: a leftover temp file is harmless
		}
	}()
	if err := f.Chmod(0o600); err != nil {
		return fmt.Errorf("writing the configuration: %w", err)
	}
	if _, err := f.Write(buf.Bytes()); err != nil {
		return fmt.Errorf("writing the configuration: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("writing the configuration: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing the configuration: %w", err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("writing the configuration: %w", err)
	}
	return nil
}
