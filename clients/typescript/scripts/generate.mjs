// Regenerates the client's types: writes openapi.json (memproc's OpenAPI document, its paths relative
// to where the site mounts memproc) and then src/schema.d.ts from it (`npm run types`).
//
//   npm run generate                          # from this checkout: manage.py spectacular, as the API serves it
//   npm run generate -- --url URL             # from a running site: URL of its api/memproc/schema/
//   MEMPROC_SCHEMA_URL=URL npm run generate   # the same
//
// Without a URL it runs `manage.py spectacular` with the settings and generator that memproc's own
// schema view uses, so the document equals GET api/memproc/schema/?format=json. MEMPROC_PYTHON and
// MEMPROC_MANAGE_PY name the interpreter and manage.py (default: the checkout's .venv and manage.py).
// tests/api/test_typescript_client.py fails when openapi.json differs from what the API serves.
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(dirname(fileURLToPath(import.meta.url)));
const repo = resolve(here, "..", "..");

function argument(name) {
  const at = process.argv.indexOf(name);
  return at === -1 ? undefined : process.argv[at + 1];
}

async function fromUrl(url) {
  const address = new URL(url);
  if (!address.searchParams.has("format")) address.searchParams.set("format", "json");
  const response = await fetch(address, { headers: { Accept: "application/vnd.oai.openapi+json, application/json" } });
  if (!response.ok) throw new Error(`GET ${address} answered ${response.status}`);
  return response.json();
}

function fromManagePy() {
  const python =
    process.env.MEMPROC_PYTHON ?? [join(repo, ".venv", "bin", "python")].find(existsSync) ?? "python3";
  const managePy = process.env.MEMPROC_MANAGE_PY ?? join(repo, "manage.py");
  const folder = mkdtempSync(join(tmpdir(), "memproc-openapi-"));
  const file = join(folder, "openapi.json");
  try {
    const run = spawnSync(
      python,
      [
        managePy,
        "spectacular",
        "--format=openapi-json",
        `--file=${file}`,
        "--custom-settings=memproc.api.schema.SCHEMA_SETTINGS",
        "--generator-class=memproc.api.schema.MemprocSchemaGenerator",
        "--fail-on-warn",
      ],
      { stdio: ["ignore", "inherit", "inherit"] },
    );
    if (run.error) throw run.error;
    if (run.status !== 0) throw new Error(`${python} ${managePy} spectacular failed (exit ${run.status})`);
    return JSON.parse(readFileSync(file, "utf8"));
  } finally {
    rmSync(folder, { recursive: true, force: true });
  }
}

// The site's mount point (e.g. "/api/memproc/") is the common prefix of every path, since the API root
// is one of them. Removing it lets one client serve any site: its baseUrl names the mount.
// tests/api/test_typescript_client.py does the same to compare.
function relativeToMount(document) {
  const paths = Object.keys(document.paths ?? {});
  if (paths.length === 0) throw new Error("The OpenAPI document has no paths");
  let prefix = paths.reduce((common, path) => {
    let i = 0;
    while (i < common.length && common[i] === path[i]) i++;
    return common.slice(0, i);
  });
  prefix = prefix.slice(0, prefix.lastIndexOf("/"));
  const relative = {};
  for (const path of paths) relative[path.slice(prefix.length)] = document.paths[path];
  return { ...document, paths: relative };
}

const url = argument("--url") ?? process.env.MEMPROC_SCHEMA_URL;
const document = relativeToMount(url ? await fromUrl(url) : fromManagePy());
writeFileSync(join(here, "openapi.json"), JSON.stringify(document, null, 2) + "\n");
console.log(`openapi.json: ${Object.keys(document.paths).length} paths, from ${url ?? "manage.py spectacular"}`);

const types = spawnSync("npm", ["run", "--silent", "types"], {
  cwd: here,
  stdio: "inherit",
  shell: process.platform === "win32",
});
process.exit(types.status ?? 1);
