package config

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"
)

// Source says where a value came from.
type Source string

// The sources of a value, from the highest precedence down.
const (
	SourceFlag    Source = "flag"
	SourceEnv     Source = "env"
	SourceFile    Source = "file"
	SourceDefault Source = "default"
)

// Config is the settings of one run: the file's values, flag values set
// on it, and the environment, read when a value is asked for. The zero
// Config has no file and no flags.
type Config struct {
	file  map[string]string // name → parsed value
	flags map[string]string
}

// Load reads the configuration file at path; a file that does not exist
// is an empty one. It fails, naming the file, on malformed JSON, on an
// unknown key and on a value of the wrong type.
func Load(path string) (*Config, error) {
	entries, err := readFile(path)
	if err != nil {
		return nil, err
	}
	c := &Config{file: make(map[string]string, len(entries))}
	var errs []error
	for _, e := range entries {
		k, err := Lookup(e.name)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s:%d: %w", path, e.line, err))
			continue
		}
		v, err := decodeValue(k, e.raw)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s:%d: %s: %w", path, e.line, k.Name, err))
			continue
		}
		c.file[k.Name] = v
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return c, nil
}

// SetFlag makes value, given on the command line, the value of the key
// called name, above every other source. It fails on an unknown key or a
// value the key does not accept.
func (c *Config) SetFlag(name, value string) error {
	k, err := Lookup(name)
	if err != nil {
		return err
	}
	v, err := k.parse(value)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if c.flags == nil {
		c.flags = map[string]string{}
	}
	c.flags[name] = v
	return nil
}

// Get returns the effective value of the key called name and where it
// came from: a flag, else the environment (a variable set to "" counts as
// unset), else the file, else the default. Booleans read "true" or
// "false". It fails on an unknown key and on an environment value the key
// does not accept, naming the variable.
func (c *Config) Get(name string) (value string, source Source, err error) {
	k, err := Lookup(name)
	if err != nil {
		return "", "", err
	}
	return c.get(k)
}

func (c *Config) get(k Key) (string, Source, error) {
	if v, ok := c.flags[k.Name]; ok {
		return v, SourceFlag, nil
	}
	if ev := os.Getenv(k.Env); ev != "" {
		v, err := k.parse(ev)
		if err != nil {
			return "", SourceEnv, fmt.Errorf("environment variable %s (%s): %w", k.Env, k.Name, err)
		}
		return v, SourceEnv, nil
	}
	if v, ok := c.file[k.Name]; ok {
		return v, SourceFile, nil
	}
	return k.Default, SourceDefault, nil
}

// Display is Get for showing: the value of a secret key reads "<set>", or
// "" when it has none.
func (c *Config) Display(name string) (value string, source Source, err error) {
	k, err := Lookup(name)
	if err != nil {
		return "", "", err
	}
	v, src, err := c.get(k)
	if k.Secret && v != "" {
		v = "<set>"
	}
	return v, src, err
}

// Validate checks the environment variables of every key and reports
// each one whose value its key does not accept, naming the variable. Flag
// and file values were checked when they were read.
func (c *Config) Validate() error {
	var errs []error
	for _, k := range keys {
		if _, src, err := c.get(k); err != nil && src == SourceEnv {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Apply puts into this process's environment the value of every key that
// comes from a flag or the file, in the form the environment's readers
// expect (a boolean as "1" or unset), and rewrites an environment value
// given in another accepted form (true for 1). Secret keys are never put
// in the environment. Invalid environment values are left alone
// (Validate reports them).
func (c *Config) Apply() error {
	var errs []error
	for _, k := range keys {
		if k.Secret {
			continue
		}
		v, src, err := c.get(k)
		if err != nil || src == SourceDefault {
			continue
		}
		ev := k.envForm(v)
		if ev == os.Getenv(k.Env) {
			continue
		}
		if ev == "" {
			err = os.Unsetenv(k.Env)
		} else {
			err = os.Setenv(k.Env, ev)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("setting %s: %w", k.Env, err))
		}
	}
	return errors.Join(errs...)
}

// value is the effective value of a key of one of the types want, with
// an environment value that does not parse passed over (Validate reports
// it). A name that is not a key, or a key of another type, is a
// programming error and panics.
func (c *Config) value(name string, want ...Type) string {
	k := mustLookup(name)
	ok := false
	for _, t := range want {
		ok = ok || k.Type == t
	}
	if !ok {
		panic(fmt.Sprintf("config: %s is a %s key, not %s", name, k.Type, want[0]))
	}
	v, _, err := c.get(k)
	if err != nil {
		if v, ok := c.file[k.Name]; ok {
			return v
		}
		return k.Default
	}
	return v
}

// String returns the value of a text or enum key.
func (c *Config) String(name string) string { return c.value(name, TypeString, TypeEnum) }

// Bool returns the value of a boolean key.
func (c *Config) Bool(name string) bool { return c.value(name, TypeBool) == "true" }

// Int returns the value of a whole-number key.
func (c *Config) Int(name string) int {
	n, err := strconv.Atoi(c.value(name, TypeInt))
	if err != nil {
		panic(fmt.Sprintf("config: %s holds a value that was not checked: %v", name, err))
	}
	return n
}

// Bytes returns the value of a size key, in bytes.
func (c *Config) Bytes(name string) int64 {
	v := c.value(name, TypeBytes)
	if isZero(v) {
		return 0 // only a key that takes 0 for none holds it (parse)
	}
	n, err := ParseBytes(v)
	if err != nil {
		panic(fmt.Sprintf("config: %s holds a value that was not checked: %v", name, err))
	}
	return n
}

// Duration returns the value of a duration key.
func (c *Config) Duration(name string) time.Duration {
	d, err := time.ParseDuration(c.value(name, TypeDuration))
	if err != nil {
		panic(fmt.Sprintf("config: %s holds a value that was not checked: %v", name, err))
	}
	return d
}
