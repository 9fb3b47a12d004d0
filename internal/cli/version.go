package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"runtime/debug"
	"strconv"
)

func init() {
	registerCommand(&command{
		name:    "version",
		usage:   "[-json]",
		summary: "module version and VCS revision, time and modified flag of this build",
		run:     runVersion,
	})
}

// buildVersion is what `relay version` reports, from the build info the Go
// toolchain embeds (`go build` in a checkout stamps the vcs.* settings).
type buildVersion struct {
	Module    string `json:"module"`
	Version   string `json:"version"`
	Revision  string `json:"revision,omitempty"`
	Time      string `json:"time,omitempty"`
	Modified  bool   `json:"modified"`
	GoVersion string `json:"go"`
}

// readVersion extracts the version from build info; a binary built without
// module support (ok false) reports "unknown".
func readVersion(bi *debug.BuildInfo, ok bool) buildVersion {
	if !ok || bi == nil {
		return buildVersion{Module: "github.com/relaystation/relay", Version: "unknown"}
	}
	v := buildVersion{Module: bi.Main.Path, Version: bi.Main.Version, GoVersion: bi.GoVersion}
	if v.Version == "" {
		v.Version = "(devel)"
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.time":
			v.Time = s.Value
		case "vcs.modified":
			v.Modified, _ = strconv.ParseBool(s.Value)
		}
	}
	return v
}

func (v buildVersion) write(w io.Writer) {
	fmt.Fprintf(w, "relay %s (%s)\n", v.Version, v.Module)
	if v.Revision == "" {
		fmt.Fprintln(w, "revision: unknown (built without VCS information)")
	} else {
		fmt.Fprintf(w, "revision: %s%s\n", v.Revision, map[bool]string{true: " (modified)"}[v.Modified])
		fmt.Fprintf(w, "time:     %s\n", v.Time)
	}
	fmt.Fprintf(w, "go:       %s\n", v.GoVersion)
}

func runVersion(_ context.Context, a *app, args []string) error {
	fs := a.flags("version")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args); err != nil {
		return err
	}
	v := readVersion(debug.ReadBuildInfo())
	if *asJSON {
		return json.NewEncoder(a.stdout).Encode(v)
	}
	v.write(a.stdout)
	return nil
}
