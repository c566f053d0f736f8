//go:build e2e

package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"debug/elf"
	"debug/pe"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// krewDir holds krew (as kubectl-krew) and validate-krew-manifest, built by make tools from
// krew's own module.
const krewDir = "bin/tools/krew/v0.4.3"

// krewManifest is the part of krew's Plugin manifest (sigs.k8s.io/krew/pkg/index) make dist
// writes; read strictly, so a misspelt field fails.
type krewManifest struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Version          string         `json:"version"`
		ShortDescription string         `json:"shortDescription"`
		Description      string         `json:"description"`
		Caveats          string         `json:"caveats"`
		Platforms        []krewPlatform `json:"platforms"`
	} `json:"spec"`
}

type krewPlatform struct {
	Selector struct {
		MatchLabels map[string]string `json:"matchLabels"`
	} `json:"selector"`
	URI    string     `json:"uri"`
	Sha256 string     `json:"sha256"`
	Bin    string     `json:"bin"`
	Files  []krewFile `json:"files"`
}

type krewFile struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// TestDistBuildsAgentctlForEveryPlatformWithChecksumsAndAKrewManifest: `make dist` (hack/dist.sh)
// packs agentctl, stamped with the version `make build` stamps (git describe), into one archive
// per platform, checksums.txt that `sha256sum -c` accepts, and a krew manifest that krew's own
// validator accepts, with a platform per archive (its os/arch, sha256 and uri); krew installs
// every archive from it, and the installed plugin runs as `kubectl agentplane`.
func TestDistBuildsAgentctlForEveryPlatformWithChecksumsAndAKrewManifest(t *testing.T) {
	root := repoRoot(t)
	kubectl := mustExist(t, filepath.Join(root, "bin", "envtest", "kubectl"), "tools")
	krew := filepath.Join(root, krewDir)
	mustExist(t, filepath.Join(krew, "kubectl-krew"), "tools")
	validate := mustExist(t, filepath.Join(krew, "validate-krew-manifest"), "tools")
	ctx := context.Background()
	dist := t.TempDir()
	const url = "https://downloads.example.invalid/agentctl/test"
	// Two of the six platforms, to keep CI time down: the one this machine runs (linux/amd64) and
	// one with another OS and architecture (windows/arm64), which compiles all of agentctl's
	// packages afresh (this test took 136 s in all here on 2026-12-02, after make build).
	platforms := [][2]string{{"linux", "amd64"}, {"windows", "arm64"}}
	out, err := runWithin(ctx, t, 30*time.Minute, nil, "make", "-C", root, "-s", "dist",
		"DIST_DIR="+dist, "DIST_PLATFORMS=linux/amd64 windows/arm64", "DIST_URL="+url)
	if err != nil {
		t.Fatalf("make dist: %v\n%s", err, out)
	}
	// The version the Makefile stamps (VERSION: git describe --always --dirty).
	described, err := exec.CommandContext(ctx, "git", "-C", root, "describe", "--always", "--dirty").Output()
	if err != nil {
		t.Fatalf("git describe: %v", err)
	}
	version := strings.TrimSpace(string(described))
	_, statErr := os.Stat(filepath.Join(root, "LICENSE"))
	hasLicense := statErr == nil

	manifestPath := filepath.Join(dist, "krew", "agentplane.yaml")
	sums := map[string]string{} // archive name: its sha256
	var names []string
	for _, p := range platforms {
		goos, arch := p[0], p[1]
		name := fmt.Sprintf("agentctl_%s_%s_%s.tar.gz", version, goos, arch)
		names = append(names, name)
		b, err := os.ReadFile(filepath.Join(dist, name))
		if err != nil {
			t.Fatalf("make dist made no %s archive: %v\n%s", p, err, out)
		}
		sum := sha256.Sum256(b)
		sums[name] = hex.EncodeToString(sum[:])
		bin := "agentctl"
		if goos == "windows" {
			bin = "agentctl.exe"
		}
		files := untarGz(t, name, b)
		want := []string{bin}
		if hasLicense {
			want = append(want, "LICENSE")
		}
		if got := slices.Sorted(maps.Keys(files)); !slices.Equal(got, want) {
			t.Errorf("%s holds %v, want %v", name, got, want)
		}
		checkExecutable(t, name, goos, arch, files[bin])
	}
	for _, f := range append(slices.Clone(names), "checksums.txt", filepath.Join("krew", "agentplane.yaml")) {
		if !strings.Contains(out, filepath.Join(dist, f)) {
			t.Errorf("make dist does not say where %s is:\n%s", f, out)
		}
	}

	checkChecksums(t, dist, sums)
	checkLinuxArchiveRuns(t, dist, names[0], version)
	checkKrewManifest(t, manifestPath, version, url, sums, platforms)

	// krew's validator (the one krew-index runs on a submitted manifest): structure, semver,
	// every selector matching a platform krew knows and none overlapping. -skip-install: its own
	// install downloads each uri.
	if out, err := run(ctx, t, nil, validate, "-manifest", manifestPath, "-skip-install"); err != nil {
		t.Errorf("validate-krew-manifest: %v\n%s", err, out)
	}
	// krew installs each archive from the manifest (checking its sha256), as on that platform.
	for i, p := range platforms {
		krewRoot := t.TempDir()
		env := []string{"KREW_ROOT=" + krewRoot, "KREW_OS=" + p[0], "KREW_ARCH=" + p[1], "KREW_NO_UPGRADE_CHECK=1",
			"PATH=" + filepath.Join(krewRoot, "bin") + ":" + krew + ":" + os.Getenv("PATH")}
		out, err := run(ctx, t, env, kubectl, "krew", "install", "--manifest="+manifestPath, "--archive="+filepath.Join(dist, names[i]))
		if err != nil {
			t.Errorf("kubectl krew install --manifest --archive %s (KREW_OS=%s KREW_ARCH=%s): %v\n%s", names[i], p[0], p[1], err, out)
			continue
		}
		if p[0] != "linux" {
			if _, err := os.Stat(filepath.Join(krewRoot, "bin", "kubectl-agentplane.exe")); err != nil {
				t.Errorf("krew installed %s but put no kubectl-agentplane.exe in its bin: %v", names[i], err)
			}
			continue
		}
		// The plugin, as krew users run it: kubectl finds kubectl-agentplane on PATH.
		if out, err := run(ctx, t, env, kubectl, "agentplane", "version", "--client"); err != nil || out != "Client Version: "+version+"\n" {
			t.Errorf("kubectl agentplane version --client after krew install: %v\n%q, want %q", err, out, "Client Version: "+version+"\n")
		}
	}
}

// untarGz returns the regular files of a .tar.gz by name, and fails on anything else in it.
func untarGz(t *testing.T, name string, b []byte) map[string][]byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("%s is not gzip: %v", name, err)
	}
	tr := tar.NewReader(zr)
	files := map[string][]byte{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if h.Typeflag != tar.TypeReg || strings.Contains(h.Name, "/") {
			t.Fatalf("%s holds %q (type %c): want only files at its top", name, h.Name, h.Typeflag)
		}
		if h.Name != "LICENSE" && h.Mode&0o111 == 0 {
			t.Errorf("%s: %s is not executable (mode %o)", name, h.Name, h.Mode)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatalf("%s: %s: %v", name, h.Name, err)
		}
		files[h.Name] = data
	}
}

// checkExecutable: the binary is one for goos/arch (a PE file, "MZ" first, on windows; ELF on
// linux), with the machine type of arch.
func checkExecutable(t *testing.T, name, goos, arch string, b []byte) {
	t.Helper()
	switch goos {
	case "windows":
		if !bytes.HasPrefix(b, []byte("MZ")) {
			t.Errorf("%s: agentctl.exe does not start with MZ: not a PE file", name)
			return
		}
		f, err := pe.NewFile(bytes.NewReader(b))
		if err != nil {
			t.Errorf("%s: agentctl.exe: %v", name, err)
			return
		}
		want := map[string]uint16{"amd64": pe.IMAGE_FILE_MACHINE_AMD64, "arm64": pe.IMAGE_FILE_MACHINE_ARM64}[arch]
		if f.Machine != want {
			t.Errorf("%s: agentctl.exe is for machine %#x, want %#x (%s)", name, f.Machine, want, arch)
		}
	case "linux":
		f, err := elf.NewFile(bytes.NewReader(b))
		if err != nil {
			t.Errorf("%s: agentctl is not ELF: %v", name, err)
			return
		}
		want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[arch]
		if f.Machine != want {
			t.Errorf("%s: agentctl is for %v, want %v", name, f.Machine, want)
		}
	}
}

// checkChecksums: checksums.txt names exactly the archives, each with its sha256, in sha256sum's
// format (`sha256sum -c` in the folder accepts it).
func checkChecksums(t *testing.T, dist string, sums map[string]string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dist, "checksums.txt"))
	if err != nil {
		t.Fatalf("make dist wrote no checksums.txt: %v", err)
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		m := regexp.MustCompile(`^([0-9a-f]{64})  (\S+)$`).FindStringSubmatch(line)
		if m == nil {
			t.Errorf("checksums.txt: %q is not sha256sum's <hex>  <file>", line)
			continue
		}
		got[m[2]] = m[1]
	}
	if !maps.Equal(got, sums) {
		t.Errorf("checksums.txt says %v; the archives' sha256 are %v", got, sums)
	}
	cmd := exec.CommandContext(context.Background(), "sha256sum", "-c", "--strict", "checksums.txt")
	cmd.Dir = dist
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("sha256sum -c checksums.txt: %v\n%s", err, out)
	}
}

// checkLinuxArchiveRuns: unpacked with tar, the linux/amd64 agentctl prints the stamped version.
func checkLinuxArchiveRuns(t *testing.T, dist, name, version string) {
	t.Helper()
	dir := t.TempDir()
	ctx := context.Background()
	if out, err := run(ctx, t, nil, "tar", "-xzf", filepath.Join(dist, name), "-C", dir); err != nil {
		t.Fatalf("tar -xzf %s: %v\n%s", name, err, out)
	}
	want := "Client Version: " + version + "\n"
	if out, err := run(ctx, t, nil, filepath.Join(dir, "agentctl"), "version", "--client"); err != nil || out != want {
		t.Errorf("agentctl version --client from %s: %v\n%q, want %q (the Makefile's git describe)", name, err, out, want)
	}
}

// checkKrewManifest: the manifest names the plugin agentplane at a semver version naming the
// build, and has one platform per archive: os/arch selector, uri under DIST_URL, the archive's
// sha256, and the binary as bin and among its files.
func checkKrewManifest(t *testing.T, path, version, url string, sums map[string]string, platforms [][2]string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("make dist wrote no krew manifest: %v", err)
	}
	var m krewManifest
	if err := yaml.UnmarshalStrict(b, &m); err != nil {
		t.Fatalf("krew/agentplane.yaml: %v\n%s", err, b)
	}
	if m.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || m.Kind != "Plugin" || m.Metadata.Name != "agentplane" {
		t.Errorf("krew/agentplane.yaml is %s %s %q, want krew.googlecontainertools.github.com/v1alpha2 Plugin agentplane", m.APIVersion, m.Kind, m.Metadata.Name)
	}
	if !regexp.MustCompile(`^v\d+\.\d+\.\d+`).MatchString(m.Spec.Version) || !strings.Contains(m.Spec.Version, version) {
		t.Errorf("krew/agentplane.yaml: version %q, want a semver (v...) naming %s", m.Spec.Version, version)
	}
	if len(m.Spec.Platforms) != len(platforms) {
		t.Fatalf("krew/agentplane.yaml has %d platforms, want one per archive (%d):\n%s", len(m.Spec.Platforms), len(platforms), b)
	}
	for _, p := range platforms {
		name := fmt.Sprintf("agentctl_%s_%s_%s.tar.gz", version, p[0], p[1])
		bin := "agentctl"
		if p[0] == "windows" {
			bin = "agentctl.exe"
		}
		found := false
		for _, pl := range m.Spec.Platforms {
			if !maps.Equal(pl.Selector.MatchLabels, map[string]string{"os": p[0], "arch": p[1]}) {
				continue
			}
			found = true
			if pl.URI != url+"/"+name {
				t.Errorf("%s/%s: uri %s, want %s/%s", p[0], p[1], pl.URI, url, name)
			}
			if pl.Sha256 != sums[name] {
				t.Errorf("%s/%s: sha256 %s, but %s's is %s", p[0], p[1], pl.Sha256, name, sums[name])
			}
			if pl.Bin != bin || !slices.Contains(pl.Files, krewFile{From: bin, To: "."}) {
				t.Errorf("%s/%s: bin %q, files %+v: want %s as bin and among its files", p[0], p[1], pl.Bin, pl.Files, bin)
			}
		}
		if !found {
			t.Errorf("krew/agentplane.yaml has no platform selecting os=%s arch=%s", p[0], p[1])
		}
	}
}
