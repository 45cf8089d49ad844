#!/usr/bin/python3
"""Self-test of pgxn_meta.py: it must pass a good document and refuse broken ones.

Usage: pgxn_meta_selftest.py     (exits 0 if every case behaves, 1 otherwise)

Each case changes one thing of a valid document and says which JSON path
the checker must name.  The command line is run too, to see the exit codes
and the printed paths that tools/pgxn-check.sh relies on.
"""
import copy
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import pgxn_meta  # noqa: E402

GOOD = {
    'name': 'pair',
    'abstract': 'A key/value pair data type',
    'version': '0.1.8',
    'maintainer': 'Someone <someone@example.org>',
    'license': 'postgresql',
    'provides': {'pair': {'file': 'sql/pair.sql', 'version': '0.1.8', 'docfile': 'doc/pair.md'}},
    'prereqs': {'runtime': {'requires': {'PostgreSQL': '15.0.0', 'plpgsql': 0}}},
    'meta-spec': {'version': '1.0.0', 'url': 'https://pgxn.org/meta/spec.txt'},
    'tags': ['key value', 'pair'],
}


def changed(edit):
    doc = copy.deepcopy(GOOD)
    edit(doc)
    return doc


def setter(*path_and_value):
    *path, key, value = path_and_value

    def edit(doc):
        for k in path:
            doc = doc[k]
        doc[key] = value
    return edit


def deleter(*path_and_key):
    *path, key = path_and_key

    def edit(doc):
        for k in path:
            doc = doc[k]
        del doc[key]
    return edit


# (what, edit, the path the violation must be reported at)
BROKEN = [
    ('missing name', deleter('name'), '$'),
    ('version "1.0"', setter('version', '1.0'), '$.version'),
    ('version "01.0.0"', setter('version', '01.0.0'), '$.version'),
    ('version as a number', setter('version', 1.0), '$.version'),
    ('license not in the list', setter('license', 'PostgreSQL License'), '$.license'),
    ('license list with an unknown one', setter('license', ['mit', 'wtfpl']), '$.license[1]'),
    ('license map to a non-URI', setter('license', {'PostgreSQL': 'see LICENSE'}), '$.license.PostgreSQL'),
    ('unknown top-level key', setter('homepage', 'https://example.org/'), '$.homepage'),
    ('provides entry without file', deleter('provides', 'pair', 'file'), '$.provides.pair'),
    ('provides entry without version', deleter('provides', 'pair', 'version'), '$.provides.pair'),
    ('provides file absolute', setter('provides', 'pair', 'file', '/sql/pair.sql'), '$.provides.pair.file'),
    ('provides empty', setter('provides', {}), '$.provides'),
    ('prereq version "15"', setter('prereqs', 'runtime', 'requires', 'PostgreSQL', '15'),
     '$.prereqs.runtime.requires.PostgreSQL'),
    ('prereq version as the number 15', setter('prereqs', 'runtime', 'requires', 'PostgreSQL', 15),
     '$.prereqs.runtime.requires.PostgreSQL'),
    ('prereq range with a bad operator', setter('prereqs', 'runtime', 'requires', 'PostgreSQL', '=> 15.0.0'),
     '$.prereqs.runtime.requires.PostgreSQL'),
    ('prereq phase unknown', setter('prereqs', 'install', {'requires': {'plpgsql': 0}}), '$.prereqs.install'),
    ('prereq relationship unknown', setter('prereqs', 'runtime', 'needs', {'plpgsql': 0}),
     '$.prereqs.runtime.needs'),
    ('release_status "beta"', setter('release_status', 'beta'), '$.release_status'),
    ('name with a space', setter('name', 'my pair'), '$.name'),
    ('name with a slash', setter('name', 'a/b'), '$.name'),
    ('name one character', setter('name', 'p'), '$.name'),
    ('tags a string', setter('tags', 'pair'), '$.tags'),
    ('tag of 256 characters', setter('tags', ['x' * 256]), '$.tags[0]'),
    ('tag listed twice', setter('tags', ['pair', 'pair']), '$.tags[1]'),
    ('meta-spec 2.0.0', setter('meta-spec', 'version', '2.0.0'), '$["meta-spec"].version'),
    ('meta-spec missing', deleter('meta-spec'), '$'),
    ('maintainer empty list', setter('maintainer', []), '$.maintainer'),
    ('abstract empty', setter('abstract', ''), '$.abstract'),
    ('resources repository without type', setter('resources', {'repository': {'url': 'https://example.org/r.git'}}),
     '$.resources.repository'),
    ('resources homepage not a URI', setter('resources', {'homepage': 'example.org'}), '$.resources.homepage'),
    ('resources bugtracker mailto not an address', setter('resources', {'bugtracker': {'mailto': 'bugs'}}),
     '$.resources.bugtracker.mailto'),
]

FINE = [
    ('the good document', lambda doc: None),
    ('x_ custom key', setter('x_built_with', 'make')),
    ('license map', setter('license', {'PostgreSQL': 'https://www.postgresql.org/about/licence'})),
    ('maintainer list', setter('maintainer', ['A <a@example.org>', 'B'])),
    ('version range', setter('prereqs', 'runtime', 'requires', 'PostgreSQL', '>= 15.0.0, < 19.0.0')),
    ('prerelease version', setter('version', '1.0.0-beta.2')),
    ('resources', setter('resources', {'homepage': 'https://example.org/',
                                       'bugtracker': {'web': 'https://example.org/issues'},
                                       'repository': {'url': 'https://example.org/r.git', 'type': 'git'}})),
    ('release_status testing', setter('release_status', 'testing')),
]


def main():
    failures = 0

    def report(ok, what):
        nonlocal failures
        failures += not ok
        print(('ok' if ok else 'not ok') + ' - ' + what)

    for what, edit in FINE:
        errors, _ = pgxn_meta.check_text(json.dumps(changed(edit)))
        report(not errors, f'accepted: {what}' + ''.join(f'\n    {p}: {m}' for p, m in errors))
    for what, edit, path in BROKEN:
        errors, _ = pgxn_meta.check_text(json.dumps(changed(edit)))
        ok = any(p == path for p, _ in errors)
        report(ok, f'refused: {what} (at {path})' +
               ('' if ok else f'; reported: {errors or "nothing"}'))
    errors, _ = pgxn_meta.check_text('{"name": "a", "name": "b"}')
    report(any('twice' in m for _, m in errors), 'refused: a key twice in one object')
    errors, _ = pgxn_meta.check_text('{"name": ')
    report(bool(errors), 'refused: not JSON')

    # The command line: exit codes, the path printed, and --dist-root.
    with tempfile.TemporaryDirectory() as tmp:
        good, bad = os.path.join(tmp, 'good.json'), os.path.join(tmp, 'bad.json')
        with open(good, 'w') as f:
            json.dump(GOOD, f)
        with open(bad, 'w') as f:
            json.dump(changed(setter('version', '1.0')), f)
        script = os.path.join(HERE, 'pgxn_meta.py')

        def run(*args):
            return subprocess.run([sys.executable, script, *args], capture_output=True, text=True)
        r = run(good)
        report(r.returncode == 0 and 'valid' in r.stdout, f'command line: a good file exits 0 ({r.stdout.strip()})')
        r = run(bad)
        report(r.returncode == 1 and '$.version' in r.stdout, 'command line: a bad file exits 1 and names $.version')
        r = run('--dist-root', tmp, good)
        report(r.returncode == 1 and '$.provides.pair.file' in r.stdout,
               'command line: --dist-root refuses a provides file that is not there')
        os.makedirs(os.path.join(tmp, 'sql'))
        os.makedirs(os.path.join(tmp, 'doc'))
        open(os.path.join(tmp, 'sql', 'pair.sql'), 'w').close()
        open(os.path.join(tmp, 'doc', 'pair.md'), 'w').close()
        r = run('--dist-root', tmp, good)
        report(r.returncode == 0, 'command line: --dist-root accepts it once the files are there')

    print(f'{"FAILED" if failures else "passed"}: {failures} failure(s)')
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
