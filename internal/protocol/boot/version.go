package boot

import (
	"encoding/json"
	"fmt"

	"github.com/nsys-cortex/cortex/internal/protocol"
)

// Version of the boot contract: of NsboxConfig and VMConfig, which a host
// and a PID 1 of different builds may exchange (an image built earlier, a
// host upgraded since). The rules are the channel's (docs/protocol.md,
// "Boot configuration"): the same Major interoperates, a minor only adds
// optional fields, and a reader ignores the fields it does not know. A
// config without a version is 1.0, as every config before versions was.
const (
	Major = 1
	Minor = 0
)

// Version returns "Major.Minor".
func Version() string { return fmt.Sprintf("%d.%d", Major, Minor) }

// CheckVersion accepts a config's version v ("" for 1.0) when it has this
// build's major version; otherwise the error, which wraps
// protocol.ErrIncompatible, names what (the config) and both versions.
func CheckVersion(what, v string) error {
	if v == "" {
		v = "1.0"
	}
	major, _, err := protocol.ParseVersion(v)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if major != Major {
		return fmt.Errorf("%w: %s is boot contract version %s, but this cortex-agent reads %s: "+
			"run a cortex-agent as new as the host (build the VM image again, or upgrade nsys-cortex)",
			protocol.ErrIncompatible, what, v, Version())
	}
	return nil
}

// decode unmarshals data into v, a config, once its version (read first,
// so that a config of another major is refused as such and not for a
// field it changed) passes CheckVersion. Unknown fields are ignored.
func decode(what string, data []byte, v any) error {
	var head struct {
		Version string `json:"version"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if err := CheckVersion(what, head.Version); err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// DecodeNsboxConfig reads an NsboxConfig as nsbox's PID 1 does.
func DecodeNsboxConfig(data []byte) (NsboxConfig, error) {
	var c NsboxConfig
	err := decode("the sandbox configuration", data, &c)
	return c, err
}

// EncodeVMConfig is c as the host writes it on the config disk: JSON, its
// Version set to this build's. At 1.0 the version is left out (which
// means 1.0): guests built before configs were versioned refuse every
// field they do not know, and with it they still boot.
func EncodeVMConfig(c *VMConfig) ([]byte, error) {
	out := *c
	out.Version = Version()
	if Major == 1 && Minor == 0 {
		out.Version = ""
	}
	return json.Marshal(&out)
}

// DecodeVMConfig reads the config disk's JSON (without its NUL padding)
// as the guest's PID 1 does.
func DecodeVMConfig(data []byte) (VMConfig, error) {
	var c VMConfig
	err := decode("the config disk", data, &c)
	return c, err
}
