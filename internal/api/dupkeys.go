package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
)

// checkKeys refuses a JSON body in which an object names a key twice.
// Go's decoder takes the last of two values, and matches struct fields
// without regard to case; something in front of the daemon (a proxy, a
// policy, a log) may read the first, so the request would mean two things.
// So: a key given twice is refused, and, in an object decoded into a
// struct, two keys that differ only in case are too (in a map, "a" and
// "A" are two keys). t is the type the body decodes into.
func checkKeys(data []byte, t reflect.Type) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := walkValue(dec, t, ""); err != errMalformed {
		return err
	}
	return nil // the decoder proper reports malformed JSON
}

// errMalformed ends the walk at JSON the tokenizer cannot read: a loop
// over an array or object must stop there (More may go on reporting more
// after a token error: an unterminated string stays in its buffer).
var errMalformed = errors.New("malformed JSON")

func walkValue(dec *json.Decoder, t reflect.Type, path string) error {
	tok, err := dec.Token()
	if err == io.EOF {
		return nil
	}
	if err != nil {
		return errMalformed
	}
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch tok {
	case json.Delim('{'):
		return walkObject(dec, t, path)
	case json.Delim('['):
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for i := 0; dec.More(); i++ {
			if err := walkValue(dec, elem, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		dec.Token() // ]
	}
	return nil
}

func walkObject(dec *json.Decoder, t reflect.Type, path string) error {
	isStruct := t != nil && t.Kind() == reflect.Struct
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return errMalformed
		}
		key, _ := tok.(string)
		norm := key
		if isStruct {
			norm = strings.ToLower(key)
		}
		name := key
		if path != "" {
			name = path + "." + key
		}
		if seen[norm] {
			return badRequest("the body names %q twice (a JSON object's key, in any case for a field, is given once)", name)
		}
		seen[norm] = true
		var sub reflect.Type
		switch {
		case isStruct:
			sub = fieldType(t, key)
		case t != nil && t.Kind() == reflect.Map:
			sub = t.Elem()
		}
		if err := walkValue(dec, sub, name); err != nil {
			return err
		}
	}
	dec.Token() // }
	return nil
}

// fieldType is the type of struct t's field that JSON key names (as
// encoding/json matches it: its tag name or Go name, in any case; the
// fields of embedded structs count as t's own).
func fieldType(t reflect.Type, key string) reflect.Type {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				if sub := fieldType(ft, key); sub != nil {
					return sub
				}
			}
			continue
		}
		if name == "" {
			name = f.Name
		}
		if strings.EqualFold(name, key) {
			return f.Type
		}
	}
	return nil
}
