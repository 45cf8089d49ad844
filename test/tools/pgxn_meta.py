#!/usr/bin/python3
"""Check a META.json against the PGXN Meta Spec 1.0.0 (https://pgxn.org/spec/).

Usage: pgxn_meta.py [--dist-root DIR] [META.json]   (default ./META.json)

Prints each violation as "JSON-path: what is wrong" and exits 1 if there is
any; otherwise prints one line saying the document is valid and exits 0.
With --dist-root, the files that "provides" names (file, docfile) must also
exist below DIR, the top directory of the distribution.

The rules are those of the spec's text and of the JSON schemas PGXN
publishes for it (github.com/pgxn/meta, schema/v1), written out here with
the standard library only.  test/tools/pgxn_meta_selftest.py feeds it
broken documents to show that it refuses them.
"""
import json
import os
import re
import sys
import urllib.parse

# Semantic Versioning 2.0.0: x.y.z, no leading zeros, optional
# -prerelease and +build parts.
_NUM = r'(?:0|[1-9][0-9]*)'
_PRE_ID = r'(?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)'
SEMVER = (rf'{_NUM}\.{_NUM}\.{_NUM}'
          rf'(?:-{_PRE_ID}(?:\.{_PRE_ID})*)?'
          r'(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?')
SEMVER_RE = re.compile(rf'\A{SEMVER}\Z')
# One clause of a version range: an optional operator, then a version
# (or 0, "any version").
RANGE_CLAUSE_RE = re.compile(rf'\A(?:(?:==|!=|<=|>=|<|>)\s*)?(?:{SEMVER}|0)\Z')

LICENSES = {
    'agpl_3', 'apache_1_1', 'apache_2_0', 'artistic_1', 'artistic_2', 'bsd',
    'freebsd', 'gfdl_1_2', 'gfdl_1_3', 'gpl_1', 'gpl_2', 'gpl_3', 'lgpl_2_1',
    'lgpl_3_0', 'mit', 'mozilla_1_0', 'mozilla_1_1', 'openssl', 'perl_5',
    'postgresql', 'qpl_1_0', 'ssleay', 'sun', 'zlib', 'open_source',
    'restricted', 'unrestricted', 'unknown',
}
PHASES = ('configure', 'build', 'test', 'runtime', 'develop')
RELATIONSHIPS = ('requires', 'recommends', 'suggests', 'conflicts')
RELEASE_STATUSES = ('stable', 'testing', 'unstable')
SPEC_URL = 'https://pgxn.org/meta/spec.txt'
REQUIRED = ('name', 'version', 'abstract', 'maintainer', 'license', 'provides', 'meta-spec')
OPTIONAL = ('description', 'generated_by', 'tags', 'no_index', 'prereqs',
            'release_status', 'resources')
CUSTOM_KEY_RE = re.compile(r'\A[xX]_.')
EMAIL_RE = re.compile(r'\A[^@\s<>]+@[^@\s<>]+\.[^@\s<>]+\Z')
URI_SCHEME_RE = re.compile(r'\A[A-Za-z][A-Za-z0-9+.-]*\Z')


def is_control(ch):
    return ord(ch) < 0x20 or 0x7f <= ord(ch) < 0xa0


class Checker:
    def __init__(self):
        self.errors = []

    def fail(self, path, msg):
        self.errors.append((path, msg))

    # -- paths -----------------------------------------------------------

    @staticmethod
    def sub(path, key):
        if isinstance(key, int):
            return f'{path}[{key}]'
        if re.fullmatch(r'[A-Za-z_][A-Za-z0-9_]*', key):
            return f'{path}.{key}'
        return f'{path}[{json.dumps(key)}]'

    # -- scalar types ----------------------------------------------------

    def string(self, path, v, what='a string'):
        """A non-empty string."""
        if not isinstance(v, str):
            self.fail(path, f'must be {what}, not {type_name(v)}')
            return False
        if v == '':
            self.fail(path, f'must be {what}, not empty')
            return False
        return True

    def term(self, path, v, what='a term'):
        """At least two characters, none a slash, backslash, space or control."""
        if not self.string(path, v, what):
            return
        if len(v) < 2:
            self.fail(path, f'{v!r} is too short for {what} (at least 2 characters)')
        bad = sorted({c for c in v if c in '/\\' or c.isspace() or is_control(c)})
        if bad:
            self.fail(path, f'{v!r} holds {", ".join(map(repr, bad))}: {what} may hold no '
                      'slash, backslash, space or control character')

    def semver(self, path, v):
        if self.string(path, v, 'a semantic version') and not SEMVER_RE.match(v):
            self.fail(path, f'{v!r} is not a semantic version (x.y.z, as in "1.0.0" or "2.1.0-beta1")')

    def version_range(self, path, v):
        if isinstance(v, int) and not isinstance(v, bool):
            if v != 0:
                self.fail(path, f'the number {v} is not a version range: write a string, e.g. "{v}.0.0"')
            return
        if not self.string(path, v, 'a version range'):
            return
        for clause in v.split(','):
            if not RANGE_CLAUSE_RE.match(clause.strip()):
                self.fail(path, f'{v!r}: {clause.strip()!r} is not [==|!=|<|<=|>|>=] followed by '
                          'a semantic version (x.y.z) or 0')

    def uri(self, path, v):
        if not self.string(path, v, 'a URI'):
            return
        parts = urllib.parse.urlsplit(v)
        if not URI_SCHEME_RE.match(parts.scheme) or any(c.isspace() for c in v):
            self.fail(path, f'{v!r} is not an absolute URI')
        elif parts.scheme in ('http', 'https', 'git', 'ssh', 'ftp') and not parts.netloc:
            self.fail(path, f'{v!r} has no host')

    def email(self, path, v):
        if self.string(path, v, 'an e-mail address') and not EMAIL_RE.match(v):
            self.fail(path, f'{v!r} is not an e-mail address')

    def rel_path(self, path, v):
        """A path relative to the distribution's top, with unix conventions."""
        if not self.string(path, v, 'a file path'):
            return
        if v.startswith('/') or '\\' in v or re.match(r'[A-Za-z]:', v):
            self.fail(path, f'{v!r} must be a relative path with / as separator')
        elif '..' in v.split('/'):
            self.fail(path, f'{v!r} leaves the distribution (..)')

    # -- containers ------------------------------------------------------

    def obj(self, path, v, what='an object'):
        if not isinstance(v, dict):
            self.fail(path, f'must be {what}, not {type_name(v)}')
            return False
        return True

    def keys(self, path, v, allowed, required=(), any_of=()):
        """Unknown keys (other than x_/X_ ones), missing required keys."""
        for k in v:
            if k not in allowed and not CUSTOM_KEY_RE.match(k):
                self.fail(self.sub(path, k), 'unknown key (custom keys must start with x_ or X_)')
        for k in required:
            if k not in v:
                self.fail(path, f'lacks the required key "{k}"')
        if any_of and not any(k in v for k in any_of):
            self.fail(path, 'must have at least one of ' + ', '.join(f'"{k}"' for k in any_of))

    def string_list(self, path, v, item, what):
        """A non-empty list of unique items, each checked by item()."""
        if not isinstance(v, list):
            self.fail(path, f'must be {what}, not {type_name(v)}')
            return
        if not v:
            self.fail(path, f'must be {what}, not an empty list')
        seen = set()
        for i, x in enumerate(v):
            item(self.sub(path, i), x)
            if isinstance(x, str):
                if x in seen:
                    self.fail(self.sub(path, i), f'{x!r} is listed twice')
                seen.add(x)

    # -- the document ----------------------------------------------------

    def document(self, doc):
        p = '$'
        if not self.obj(p, doc, 'a JSON object'):
            return
        # Consumers must check meta-spec first and stop if they do not know it.
        if 'meta-spec' in doc and not self.meta_spec(self.sub(p, 'meta-spec'), doc['meta-spec']):
            return
        self.keys(p, doc, REQUIRED + OPTIONAL, required=REQUIRED)
        checks = {
            'name': lambda q, v: self.term(q, v, 'a distribution name'),
            'version': self.semver,
            'abstract': self.string,
            'description': self.string,
            'generated_by': self.string,
            'maintainer': self.maintainer,
            'license': self.license,
            'provides': self.provides,
            'prereqs': self.prereqs,
            'release_status': self.release_status,
            'resources': self.resources,
            'tags': lambda q, v: self.string_list(q, v, self.tag, 'a list of tags'),
            'no_index': self.no_index,
        }
        for k, check in checks.items():
            if k in doc:
                check(self.sub(p, k), doc[k])

    def meta_spec(self, p, v):
        if not self.obj(p, v):
            return False
        self.keys(p, v, ('version', 'url'), required=('version',))
        version = v.get('version')
        if 'version' in v and not (isinstance(version, str) and re.fullmatch(r'1\.0\.[0-9]+', version)):
            self.fail(self.sub(p, 'version'),
                      f'{version!r}: this checker knows the Meta Spec 1.0.x only; nothing else was checked')
            return False
        if 'url' in v and v['url'] != SPEC_URL:
            self.fail(self.sub(p, 'url'), f'{v["url"]!r} must be {SPEC_URL!r}')
        return True

    def maintainer(self, p, v):
        if isinstance(v, list):
            self.string_list(p, v, self.string, 'a list of maintainers')
        else:
            self.string(p, v, 'a string or a list of strings ("name <e-mail>")')

    def license(self, p, v):
        def known(q, x):
            if self.string(q, x, 'a license') and x not in LICENSES:
                self.fail(q, f'{x!r} is none of the spec\'s license names '
                          '(e.g. "postgresql", "mit", "bsd"); else use {"name": "URL"}')
        if isinstance(v, dict):
            if not v:
                self.fail(p, 'must name at least one license')
            for name, url in v.items():
                self.uri(self.sub(p, name), url)
        elif isinstance(v, list):
            self.string_list(p, v, known, 'a list of licenses')
        else:
            known(p, v)

    def provides(self, p, v):
        if not self.obj(p, v):
            return
        if not v:
            self.fail(p, 'must name at least one extension')
        for name, ext in v.items():
            q = self.sub(p, name)
            self.term(q, name, 'an extension name')
            if not self.obj(q, ext):
                continue
            self.keys(q, ext, ('file', 'version', 'abstract', 'docfile'), required=('file', 'version'))
            if 'file' in ext:
                self.rel_path(self.sub(q, 'file'), ext['file'])
            if 'docfile' in ext:
                self.rel_path(self.sub(q, 'docfile'), ext['docfile'])
            if 'version' in ext:
                self.semver(self.sub(q, 'version'), ext['version'])
            if 'abstract' in ext:
                self.string(self.sub(q, 'abstract'), ext['abstract'])

    def prereqs(self, p, v):
        if not self.obj(p, v):
            return
        self.keys(p, v, PHASES, any_of=PHASES)
        for phase in PHASES:
            if phase not in v:
                continue
            q = self.sub(p, phase)
            if not self.obj(q, v[phase]):
                continue
            self.keys(q, v[phase], RELATIONSHIPS, any_of=RELATIONSHIPS)
            for rel in RELATIONSHIPS:
                if rel not in v[phase]:
                    continue
                r = self.sub(q, rel)
                deps = v[phase][rel]
                if not self.obj(r, deps):
                    continue
                if not deps:
                    self.fail(r, 'must name at least one prerequisite')
                for name, rng in deps.items():
                    self.term(self.sub(r, name), name, 'a prerequisite name')
                    self.version_range(self.sub(r, name), rng)

    def release_status(self, p, v):
        if v not in RELEASE_STATUSES:
            self.fail(p, f'{v!r} must be one of ' + ', '.join(f'"{s}"' for s in RELEASE_STATUSES))

    def resources(self, p, v):
        if not self.obj(p, v):
            return
        self.keys(p, v, ('homepage', 'bugtracker', 'repository'),
                  any_of=('homepage', 'bugtracker', 'repository'))
        if 'homepage' in v:
            self.uri(self.sub(p, 'homepage'), v['homepage'])
        q = self.sub(p, 'bugtracker')
        if 'bugtracker' in v and self.obj(q, v['bugtracker']):
            bt = v['bugtracker']
            self.keys(q, bt, ('web', 'mailto'), any_of=('web', 'mailto'))
            if 'web' in bt:
                self.uri(self.sub(q, 'web'), bt['web'])
            if 'mailto' in bt:
                self.email(self.sub(q, 'mailto'), bt['mailto'])
        q = self.sub(p, 'repository')
        if 'repository' in v and self.obj(q, v['repository']):
            repo = v['repository']
            self.keys(q, repo, ('url', 'web', 'type'))
            if 'web' not in repo and not ('url' in repo and 'type' in repo):
                self.fail(q, 'must have "web", or "url" with "type"')
            for k in ('url', 'web'):
                if k in repo:
                    self.uri(self.sub(q, k), repo[k])
            if 'type' in repo and self.string(self.sub(q, 'type'), repo['type']) \
                    and not re.fullmatch(r'[a-z]+', repo['type']):
                self.fail(self.sub(q, 'type'), f'{repo["type"]!r} must be lowercase letters (git, hg, svn...)')

    def tag(self, p, v):
        if not self.string(p, v, 'a tag'):
            return
        if not 2 <= len(v) <= 255:
            self.fail(p, f'a tag has 2 to 255 characters, this one {len(v)}')
        if any(c in '/\\' or is_control(c) for c in v):
            self.fail(p, f'{v!r}: a tag may hold no slash, backslash or control character')

    def no_index(self, p, v):
        if not self.obj(p, v):
            return
        self.keys(p, v, ('file', 'directory'), any_of=('file', 'directory'))
        for k in ('file', 'directory'):
            if k in v:
                if isinstance(v[k], list):
                    self.string_list(self.sub(p, k), v[k], self.rel_path, 'a list of paths')
                else:
                    self.rel_path(self.sub(p, k), v[k])

    def files_exist(self, doc, root):
        """The files "provides" names are in the distribution below root."""
        provides = doc.get('provides') if isinstance(doc, dict) else None
        if not isinstance(provides, dict):
            return
        for name, ext in provides.items():
            if not isinstance(ext, dict):
                continue
            for k in ('file', 'docfile'):
                f = ext.get(k)
                if isinstance(f, str) and f and not os.path.isfile(os.path.join(root, f)):
                    self.fail(self.sub(self.sub(self.sub('$', 'provides'), name), k),
                              f'{f!r} is not a file of the distribution ({root})')


def type_name(v):
    return {dict: 'an object', list: 'a list', str: 'a string', bool: 'a boolean',
            int: 'a number', float: 'a number', type(None): 'null'}.get(type(v), type(v).__name__)


def no_duplicate_keys(pairs):
    seen = {}
    for k, v in pairs:
        if k in seen:
            raise ValueError(f'the key "{k}" appears twice in one object')
        seen[k] = v
    return seen


def check_text(text, dist_root=None):
    """The violations of a META.json's text: a list of (path, message)."""
    c = Checker()
    try:
        doc = json.loads(text, object_pairs_hook=no_duplicate_keys)
    except ValueError as e:
        c.fail('$', f'not valid JSON: {e}')
        return c.errors, None
    c.document(doc)
    if dist_root is not None:
        c.files_exist(doc, dist_root)
    return c.errors, doc


def main(argv):
    args = list(argv)
    dist_root = None
    if args[:1] == ['--dist-root'] and len(args) >= 2:
        dist_root = args[1]
        args = args[2:]
    if len(args) > 1 or (args and args[0].startswith('-')):
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    path = args[0] if args else 'META.json'
    try:
        with open(path, encoding='utf-8') as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        print(f'{path}: cannot read: {e}', file=sys.stderr)
        return 1
    errors, doc = check_text(text, dist_root)
    for where, msg in errors:
        print(f'{path}: {where}: {msg}')
    if errors:
        print(f'{path}: {len(errors)} violation(s) of the PGXN Meta Spec 1.0.0')
        return 1
    print(f'{path}: valid PGXN Meta Spec {doc["meta-spec"]["version"]}: {doc["name"]} {doc["version"]}, '
          f'{len(doc["provides"])} extension(s): {", ".join(sorted(doc["provides"]))}')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
