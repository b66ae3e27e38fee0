package logging_test

import (
	"testing"

	"github.com/nsys-cortex/cortex/internal/config"
	"github.com/nsys-cortex/cortex/internal/logging"
)

// TestConfigAcceptsTheSameSpecs holds config's check of log.level (config
// cannot import this package) to ParseLevels, the one parser.
func TestConfigAcceptsTheSameSpecs(t *testing.T) {
	for _, spec := range []string{
		"info", "DEBUG", "Warn", "error", "info,api=debug", "api=debug", " info , api = warn ",
		"debug,sandbox.docker=error,api_v2=info,x-y=warn", "sandbox=warn,info",
		"", " ", ",", "info,", ",info", "info,,api=debug", "verbose", "info,api=loud", "info,warn",
		"api=debug,api=warn", "=debug", "a b=debug", "api=", "api=debug=x", "api:debug", "info;api=debug",
		"ünï=debug", "info,api=debug,", "trace", "warning", "info api=debug",
	} {
		_, perr := logging.ParseLevels(spec)
		var c config.Config
		cerr := c.SetFlag("log.level", spec)
		if (perr == nil) != (cerr == nil) {
			t.Errorf("%q: logging.ParseLevels says %v, config says %v", spec, perr, cerr)
		}
	}
}
