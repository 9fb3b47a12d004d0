// Package bundle installs and uninstalls bundles' MCP servers into an
// mcp.json file.
//
// A bundle is either a relay bundle manifest (bundle.json or bundle.yaml:
// id, version, description and mcpServers in the shapes mcp.json accepts)
// or an MCP Bundle (a .mcpb archive or an unpacked directory with its
// manifest.json, the format of modelcontextprotocol/mcpb).
//
// An install patches the JSONC document (comments, order and formatting of
// the user's file survive), names each server "<bundle id>__<server>",
// substitutes ${bundlePath}, ${bundleId} and ${bundleVersion}, keeps
// ${env:VAR} for run time, applies the duplicate rule (the first enabled
// server of an identity stays enabled, later ones get "disabled": true and
// the description "Duplicate of X") and records what it wrote in a tracking
// file beside mcp.json (<file>.bundles.json). Every change is validated with
// package mcpconfig, written to a temporary file, synced and renamed over
// mcp.json under an advisory lock; the previous file is kept as <file>.bak.
// Any failure leaves mcp.json byte for byte as it was.
package bundle
