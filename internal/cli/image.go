package cli

import (
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/nsys-cortex/cortex/internal/image"
)

func (a *App) imageCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "image",
		Short: "Build the neuron image (docker mode runs it; nsbox can use its root filesystem)",
	}
	var o image.Options
	var noImport, vm bool
	build := &cobra.Command{
		Use:   "build",
		Short: "Build the neuron image with debootstrap and import it into docker (no registry needed)",
		Long: `build makes a Debian root filesystem with debootstrap (bash, coreutils,
python3, git, nodejs, npm, ca-certificates, curl), puts cortex-agent and the
user "agent" (uid 1000) in it, and imports it into the local Docker daemon as
nsys-cortex-neuron:latest. debootstrap needs root and a Debian mirror.

The root filesystem stays in images/neuron-rootfs under the home (reused by
the next build unless --rebuild): nsbox runs on it with
  nsys-cortex create --mode nsbox --image ~/.nsys-cortex/images/neuron-rootfs

--test builds the small busybox image the test suites run instead.

--vm also builds the microVM image that qemu mode boots, in images/vm under
the home (--vm-dir elsewhere): the kernel unpacked from Debian's
linux-image-amd64 (the newest in /boot, or --kernel and --modules), an
initramfs with cortex-agent as /init, and the root filesystem as a
read-only ext4 disk (mkfs.ext4 -d: no root needed for that step). With
--vm the docker import happens only when --tag is given.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := a.sandboxes(); err != nil {
				return err
			}
			agent, err := a.env.AgentBinary()
			if err != nil {
				return err
			}
			o.Agent, o.Log = agent, a.Stderr
			if o.RootFS == "" {
				name := "neuron-rootfs"
				if o.Test {
					name = "neuron-test-rootfs"
				}
				o.RootFS = filepath.Join(a.lay.ImagesDir(), name)
			}
			vm = vm || o.VM != ""
			if vm && o.VM == "" {
				o.VM = a.lay.VMImageDir()
			}
			if o.Tag == "" && !noImport && !vm {
				o.Tag = image.DefaultTag
				if o.Test {
					o.Tag = image.TestTag
				}
			}
			if noImport {
				o.Tag = ""
			}
			if err := image.Build(cmd.Context(), o); err != nil {
				return err
			}
			switch {
			case o.Tag != "":
				fmt.Fprintln(a.Stdout, o.Tag)
			case o.VM != "":
				fmt.Fprintln(a.Stdout, o.VM)
			default:
				fmt.Fprintln(a.Stdout, o.RootFS)
			}
			return nil
		},
	}
	build.Flags().StringVar(&o.Tag, "tag", "", "the docker image name (default nsys-cortex-neuron:latest, or :test with --test)")
	build.Flags().StringVar(&o.RootFS, "rootfs", "", "where to build the root filesystem (default images/neuron-rootfs under the home)")
	build.Flags().BoolVar(&o.Test, "test", false, "build the small busybox image the tests run")
	build.Flags().StringVar(&o.Suite, "suite", image.DefaultSuite, "the Debian release")
	build.Flags().StringVar(&o.Mirror, "mirror", image.DefaultMirror, "the Debian mirror")
	build.Flags().BoolVar(&o.Rebuild, "rebuild", false, "start the root filesystem from scratch")
	build.Flags().BoolVar(&noImport, "no-import", false, "only build the root filesystem (no docker needed)")
	build.Flags().BoolVar(&vm, "vm", false, "also build the microVM image (kernel, initramfs, root disk) qemu mode boots")
	build.Flags().StringVar(&o.VM, "vm-dir", "", "where to build the microVM image (default images/vm under the home; implies --vm)")
	build.Flags().StringVar(&o.Kernel, "kernel", "", "the kernel image (bzImage) for the microVM (default: the newest /boot/vmlinuz-*)")
	build.Flags().StringVar(&o.Modules, "modules", "", "that kernel's modules directory (default: /lib/modules/<its version>)")
	cmd.AddCommand(build)
	return cmd
}
