module github.com/nsys-cortex/cortex

go 1.26.8

require (
	github.com/creack/pty v1.1.24 // indirect
	github.com/elastic/go-seccomp-bpf v1.6.0 // indirect
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/spf13/cobra v1.10.2 // indirect
	github.com/spf13/pflag v1.0.9 // indirect
	golang.org/x/net v0.41.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
	golang.org/x/term v0.48.0 // indirect
)
