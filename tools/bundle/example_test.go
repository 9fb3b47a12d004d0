package bundle_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/relaystation/relay/tools/bundle"
)

func ExampleInstaller_Install() {
	dir, _ := os.MkdirTemp("", "bundle-example")
	defer os.RemoveAll(dir)
	cfg := filepath.Join(dir, "mcp.json")
	_ = os.WriteFile(cfg, []byte("{\n  // my servers\n  \"servers\": {}\n}\n"), 0o644)
	_ = os.MkdirAll(filepath.Join(dir, "weather"), 0o755)
	_ = os.WriteFile(filepath.Join(dir, "weather", "bundle.yaml"), []byte(`id: weather
version: 1.0.0
mcpServers:
  forecast:
    command: node
    args: ["${bundlePath}/forecast.js"]
    env:
      WEATHER_KEY: "${env:WEATHER_KEY}"
`), 0o644)

	// The relay's environment has WEATHER_KEY: the installed server loads.
	env := map[string]string{"WEATHER_KEY": "k-123"}
	in := &bundle.Installer{Config: cfg, DataDir: filepath.Join(dir, "data"),
		Lookup: func(name string) (string, bool) { v, ok := env[name]; return v, ok }}
	res, err := in.Install(context.Background(), filepath.Join(dir, "weather"), bundle.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("added", res.Added)
	data, _ := os.ReadFile(cfg)
	fmt.Print(string(data)[:len("{\n  // my servers\n  \"servers\": {\n    \"weather__forecast\": {")])
	// Output:
	// added [weather__forecast]
	// {
	//   // my servers
	//   "servers": {
	//     "weather__forecast": {
}
