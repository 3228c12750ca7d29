#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checks arinfo --json against the schema in docs/arinfo-json.md.

    check_json.py ARINFO TOPOLOGY.xml

Runs arinfo on the fixed topology (and once on this machine) with a clean environment
plus a few knobs, parses the output with Python's strict JSON parser and checks every
top-level key, the topology, the accelerators and their NUMA nodes, the transports,
the paths of allreduce and of the other collectives, and the knobs, including a knob
value full of bytes that need escaping.
"""
import json
import os
import subprocess
import sys

TOP_KEYS = ['schema', 'arcomm_version', 'build', 'nranks', 'host', 'topology',
            'pci_accelerators', 'cuda', 'hexagon', 'transports', 'transport_pick', 'paths',
            'collective_paths', 'path_table', 'streaming_stores', 'single_copy', 'shared_heap',
            'config',
            'other_variables', 'unknown_environment']
# The collectives of collective_paths, in their order for each size.
COLLECTIVES = ['broadcast', 'reduce', 'allgather', 'reduce_scatter', 'alltoall']
# Those whose flag path stages nranks blocks of the size (their whole sendbuf).
BLOCKS = ('reduce_scatter', 'alltoall')
UNITS = {'K': 1 << 10, 'M': 1 << 20, 'G': 1 << 30}


def size_of(text):
    """A size in the knobs' spelling ("512K", "4097"), or None for "off"."""
    if text == 'off':
        return None
    if text[-1] in UNITS:
        return int(text[:-1]) * UNITS[text[-1]]
    return int(text)


def check_collective_paths(d, flag_threshold=None):
    """collective_paths: one row per (size, collective) in the order of paths; the
    flag path while what a rank stages fits the threshold (the allreduce path's for
    broadcast, reduce and allgather, which stage their size), bulk beyond."""
    n = d['nranks']
    rows = d['collective_paths']
    assert len(rows) == len(COLLECTIVES) * len(d['paths']), len(rows)
    for i, p in enumerate(d['paths']):
        group = rows[i * len(COLLECTIVES):(i + 1) * len(COLLECTIVES)]
        assert [r['collective'] for r in group] == COLLECTIVES, group
        for r in group:
            assert set(r) == {'size', 'bytes', 'collective', 'device', 'flag_stage_bytes',
                              'path', 'path_thread_ranks', 'process_ranks_bulk'}, r
            # Process ranks' bulk path with private buffers; where ARCOMM_CMA_THRESHOLD's
            # windows of every host send a call through CMA (auto: allgather of 2 ranks,
            # 1-4 MiB), it takes the bulk path whatever its size; the windows of a host
            # where the single copy is fast only choose among bulk calls.
            assert r['process_ranks_bulk'] in ('staged', 'cma'), r
            cma = (r['process_ranks_bulk'] == 'cma' and r['collective'] == 'allgather' and
                   n == 2 and 1 << 20 <= r['bytes'] <= 4 << 20)
            assert not cma or r['path'] == 'bulk', r
            assert (r['size'], r['bytes'], r['device']) == (p['size'], p['bytes'], 'host'), r
            assert r['path'] in ('flag', 'bulk') and r['path_thread_ranks'] in ('flag', 'bulk')
            blocks = r['collective'] in BLOCKS
            assert r['flag_stage_bytes'] == r['bytes'] * (n if blocks else 1), r
            if not blocks:
                assert r['path'] == p['path'] or cma, (r, p)
                assert r['path_thread_ranks'] == p['path_thread_ranks'], (r, p)
            elif p['path'] == 'bulk' or p['path_thread_ranks'] == 'bulk':
                # More to stage than allreduce of the same size: never flag where it is not.
                assert r['path'] == 'bulk' or p['path'] == 'flag' or cma, (r, p)
                assert r['path_thread_ranks'] == 'bulk' or p['path_thread_ranks'] == 'flag'
            if flag_threshold is not None:
                want = 'flag' if r['flag_stage_bytes'] <= flag_threshold and not cma else 'bulk'
                assert r['path'] == want, (r, flag_threshold)
    # Sizes in increasing order: each collective goes from flag to bulk once at most.
    for c in COLLECTIVES:
        for key in ('path', 'path_thread_ranks'):
            kinds = [r[key] for r in rows if r['collective'] == c]
            if [r['bytes'] for r in rows if r['collective'] == c] == sorted(
                    r['bytes'] for r in rows if r['collective'] == c):
                assert kinds == sorted(kinds, key=lambda k: k == 'bulk'), (c, key, kinds)
# A log file name with quotes, a backslash, control bytes, UTF-8 and a byte that is
# not UTF-8: the JSON must still parse, and say the same thing (U+FFFD for the byte).
LOG_FILE = b'/tmp/a "q" \\ \n\t\x01\x7f \xc3\xa9 \xff end'
LOG_FILE_DECODED = '/tmp/a "q" \\ \n\t\x01\x7f \u00e9 \ufffd end'


def run(arinfo, args, extra=None):
    env = {k: v for k, v in os.environb.items()
           if not k.startswith(b'ARCOMM_') and not k.startswith(b'HWLOC_')}
    env.update(extra or {})
    p = subprocess.run([arinfo, '--json'] + args, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=50)
    assert p.returncode == 0, (p.returncode, p.stderr)
    return json.loads(p.stdout.decode('utf-8')), p.stderr.decode('utf-8', 'replace')


def check_streaming(d, knob):
    """streaming_stores: the knob's resolved value and where it came from."""
    ss = d['streaming_stores']
    assert set(ss) == {'threshold', 'threshold_bytes', 'source', 'origin', 'calibration'}, ss
    assert ss['threshold'] == knob['effective'], (ss, knob)
    assert ss['threshold_bytes'] == size_of(ss['threshold']), ss
    assert ss['source'] == ('auto' if knob['value'] == 'auto' else 'set'), (ss, knob)
    cal = ss['calibration']
    if ss['source'] == 'set':
        assert ss['origin'] is None and cal is None, ss
        return
    assert ss['origin'], ss
    assert set(cal) == {'outcome', 'crossover_bytes', 'why', 'wall_ms', 'ladder'}, cal
    assert cal['outcome'] in ('measured', 'no_crossover', 'failed', 'skipped'), cal
    assert (cal['crossover_bytes'] is not None) == (cal['outcome'] == 'measured'), cal
    assert (cal['why'] is not None) == (cal['outcome'] == 'failed'), cal
    ran = cal['outcome'] in ('measured', 'no_crossover')
    assert (cal['wall_ms'] is not None) == ran and len(cal['ladder']) == (4 if ran else 0), cal
    for r in cal['ladder']:
        assert set(r) == {'footprint_bytes', 'cached_gbps', 'streaming_gbps'}, r
    if cal['outcome'] == 'measured':
        assert ss['threshold_bytes'] <= cal['crossover_bytes'], ss


def check_single_copy(d, knob):
    """single_copy: ARCOMM_CMA_THRESHOLD, and what this process measured of the single copy."""
    sc = d['single_copy']
    assert set(sc) == {'threshold', 'source', 'fast', 'fast_source', 'calibration'}, sc
    assert sc['source'] == ('auto' if knob['value'] == 'auto' else 'set'), (sc, knob)
    cal = sc['calibration']
    if sc['source'] == 'set':
        assert cal is None and sc['threshold'] == knob['effective'], (sc, knob)
        assert sc['fast'] is None and sc['fast_source'] is None, sc
        return
    assert sc['threshold'] == 'auto', sc
    if sc['fast_source'] == 'set':
        assert cal is None and isinstance(sc['fast'], bool), sc
        return
    assert sc['fast_source'] == 'measured' and sc['fast'] == cal['fast'], sc
    assert set(cal) == {'outcome', 'why', 'readv_gbps', 'memcpy_gbps', 'ratio', 'wall_ms',
                        'fast_ratio', 'fast'}, cal
    assert cal['outcome'] in ('measured', 'failed', 'skipped'), cal
    assert (cal['why'] is not None) == (cal['outcome'] == 'failed'), cal
    measured = cal['outcome'] == 'measured'
    for key in ('readv_gbps', 'memcpy_gbps', 'ratio', 'wall_ms'):
        assert (cal[key] is not None) == measured, cal
    if measured:
        assert cal['readv_gbps'] > 0 and cal['memcpy_gbps'] > 0, cal
        assert abs(cal['ratio'] - cal['readv_gbps'] / cal['memcpy_gbps']) < 0.02, cal
    assert cal['fast'] == (measured and cal['ratio'] >= cal['fast_ratio']), cal


def walk(node):
    yield node
    for key in ('memory_children', 'children'):
        for child in node.get(key, []):
            yield from walk(child)


def check_full(d, this_system):
    assert list(d) == TOP_KEYS, list(d)
    assert d['schema'] == 'arcomm.arinfo/1'
    assert isinstance(d['arcomm_version'], str) and d['arcomm_version']
    assert set(d['build']) == {'numa', 'cuda', 'hexagon'}
    assert all(isinstance(v, bool) for v in d['build'].values())
    assert d['nranks'] == 2
    assert set(d['host']) == {'name', 'os', 'os_release', 'architecture', 'cpu_vendor',
                              'cpu_model'}
    t = d['topology']
    assert t['this_system'] is this_system
    nodes = list(walk(t['tree']))
    assert t['tree']['type'] == 'Machine'
    assert sum(n['type'] == 'PU' for n in nodes) == t['pus'] > 0
    assert sum(n['type'] == 'Core' for n in nodes) == t['cores'] > 0
    assert sum(n['type'] == 'NUMANode' for n in nodes) == t['numa_nodes'] == len(t['numa'])
    assert sum(n['memory_bytes'] for n in t['numa']) == t['memory_bytes']
    for a in d['pci_accelerators']:
        assert a['kind'] in ('gpu', 'npu')
        assert len(a['bus_id']) == 12 and a['bus_id'][4] == ':' and a['bus_id'][10] == '.'
        assert all(isinstance(n, int) for n in a['numa_nodes'])
    assert d['cuda']['built'] == d['build']['cuda']
    assert isinstance(d['cuda']['devices'], list)
    assert len(d['cuda']['peer_links']) == len(d['cuda']['devices'])
    if not d['cuda']['devices']:
        assert d['cuda']['note']
    assert d['hexagon']['built'] == d['build']['hexagon']
    if not d['hexagon']['built']:
        assert d['hexagon']['emulated'] is None and d['hexagon']['sessions'] == []
    names = [x['name'] for x in d['transports']]
    assert 'shm' in names
    assert sum(x['picked'] for x in d['transports']) == 1
    pick = d['transport_pick']
    assert pick == {'device': 'host', 'nranks': 2, 'requested': None, 'picked': 'shm',
                    'reason': None}, pick
    for x in d['transports']:
        assert x['probe_ok'] == (x['probe_reason'] is None)
    sizes = [p['bytes'] for p in d['paths']]
    assert sizes == [4, 64, 1 << 10, 16 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20], sizes
    # Process ranks' allreduce takes the single copy up to 16 MiB where it was measured
    # fast (2 ranks, ARCOMM_CMA_THRESHOLD auto), the staging slots otherwise.
    fast = bool(d['single_copy']['fast']) and d['nranks'] == 2
    for p in d['paths']:
        assert p['path'] in ('flag', 'bulk') and p['device'] == 'host'
        assert (p['bulk_variant'] is not None) == (p['path'] == 'bulk')
        if p['bulk_variant']:
            procs = 'cma' if fast and p['bytes'] <= 16 << 20 else 'staged'
            assert p['bulk_variant'] == {'thread_ranks_or_comm_mem': 'one-pass',
                                         'process_ranks': procs}, (p, d['single_copy'])
        assert isinstance(p['f32_as_bf16'], bool)
    # Paths are ordered by size, so the flag path comes first and never after bulk.
    kinds = [p['path'] for p in d['paths']]
    assert kinds == sorted(kinds, key=lambda k: k == 'bulk'), kinds
    cfg = {c['name']: c for c in d['config']}
    check_collective_paths(d, size_of(cfg['ARCOMM_FLAG_THRESHOLD']['effective']))
    check_streaming(d, cfg['ARCOMM_NT_THRESHOLD'])
    check_single_copy(d, cfg['ARCOMM_CMA_THRESHOLD'])
    # arinfo runs without libarcomm_heap.so preloaded here (with it: its size).
    preloaded = 'libarcomm_heap' in os.environ.get('LD_PRELOAD', '')
    assert d['shared_heap']['preloaded'] is preloaded, d['shared_heap']
    assert (d['shared_heap']['bytes'] is None) is not preloaded, d['shared_heap']
    assert (d['shared_heap']['min_bytes'] is None) is not preloaded, d['shared_heap']
    for c in d['config']:
        assert set(c) == {'name', 'type', 'value', 'effective', 'default', 'source', 'table',
                          'used_by', 'doc'}
        # Each backend that reads the knob, with the value its communicators use; the
        # first of them is the effective value.
        assert c['used_by'] and set(c['used_by']) <= {'shm', 'cuda', 'hexagon'}, c
        assert c['effective'] == next(iter(c['used_by'].values())), c
        assert c['name'].startswith('ARCOMM_') and c['doc']
        assert c['type'] in ('int', 'size', 'bool', 'string', 'loglevel', 'codec')
        assert c['source'] in ('default', 'environment')
        assert c['table'] in ('common', 'host', 'cuda', 'hexagon')


def main():
    arinfo, xml = sys.argv[1], sys.argv[2]
    # ARINFO_NO_CALIBRATION: the streaming-store threshold from the XML's caches alone.
    extra = {b'ARCOMM_TIMEOUT_MS': b'4321', b'ARCOMM_LOG_FILE': LOG_FILE,
             b'ARCOMM_BOGUS_KNOB': b'1', b'ARCOMM_RANK': b'0', b'ARINFO_NO_CALIBRATION': b'1',
             b'ARCOMM_PMPI': b'off'}
    d, err = run(arinfo, ['--topology', xml], extra)
    check_full(d, this_system=False)
    assert d['host'] == {'name': 'golden-host', 'os': 'Linux', 'os_release': '6.1.0-golden',
                         'architecture': 'x86_64', 'cpu_vendor': 'GenuineIntel',
                         'cpu_model': 'Example Xeon CPU @ 2.00GHz'}, d['host']
    t = d['topology']
    assert (t['packages'], t['numa_nodes'], t['cores'], t['pus']) == (2, 2, 8, 16)
    assert t['numa'] == [{'os_index': 0, 'memory_bytes': 32 << 30, 'cpus': '0-7'},
                         {'os_index': 1, 'memory_bytes': 32 << 30, 'cpus': '8-15'}]
    levels = {n['cache']['level'] for n in walk(t['tree']) if 'cache' in n}
    assert levels == {1, 2, 3}, levels
    acc = d['pci_accelerators']
    assert [(a['kind'], a['bus_id'], a['vendor'], a['numa_nodes']) for a in acc] == [
        ('gpu', '0000:17:00.0', 'NVIDIA', [0]), ('gpu', '0000:2a:00.0', 'NVIDIA', [0]),
        ('gpu', '0000:9a:00.0', 'NVIDIA', [1]), ('gpu', '0000:ab:00.0', 'NVIDIA', [1]),
        ('npu', '0000:b5:00.0', 'Qualcomm', [1])], acc
    assert acc[0]['class_id'] == '0302' and acc[0]['vendor_id'] == '10de'
    assert acc[0]['os_devices'] == ['cuda0'] and acc[0]['local_cpus'] == '0-7'
    assert acc[4]['class_id'] == '1200' and acc[4]['name'] == 'Cloud AI 100'
    cfg = {c['name']: c for c in d['config']}
    assert cfg['ARCOMM_TIMEOUT_MS']['source'] == 'environment'
    assert cfg['ARCOMM_TIMEOUT_MS']['value'] == '4321'
    assert cfg['ARCOMM_LOG_FILE']['value'] == LOG_FILE_DECODED, cfg['ARCOMM_LOG_FILE']
    assert cfg['ARCOMM_FLAG_THRESHOLD']['value'] == 'auto'
    assert cfg['ARCOMM_FLAG_THRESHOLD']['effective'] not in ('auto', '')
    # The streaming-store threshold follows the XML's 16 MiB L3, not this machine's.
    assert cfg['ARCOMM_NT_THRESHOLD']['effective'] == '16M', cfg['ARCOMM_NT_THRESHOLD']
    assert d['streaming_stores']['calibration']['outcome'] == 'skipped', d['streaming_stores']
    assert d['single_copy']['calibration']['outcome'] == 'skipped', d['single_copy']
    assert sum(c['source'] == 'environment' for c in d['config']) == 2
    assert d['unknown_environment'] == ['ARCOMM_BOGUS_KNOB'], d['unknown_environment']
    assert 'ARCOMM_BOGUS_KNOB' in err and 'ARCOMM_RANK' not in err, err
    # The other components' variables: listed with their value, never taken for typos.
    other = {v['name']: v for v in d['other_variables']}
    assert set(other) == {'ARCOMM_PMPI', 'ARCOMM_PMPI_MIN_BYTES', 'ARCOMM_PMPI_PROGRESS_US',
                          'ARCOMM_HEAP_BYTES', 'ARCOMM_HEAP_MIN', 'ARCOMM_LIBRARY',
                          'ARCOMM_MPI_LIBRARY', 'ARCOMM_TORCH_NATIVE'}, other
    for v in other.values():
        assert set(v) == {'name', 'component', 'value', 'default', 'doc'} and v['doc'], v
    assert other['ARCOMM_PMPI']['value'] == 'off' and other['ARCOMM_PMPI']['component'] == \
        'libarcomm_pmpi', other
    assert other['ARCOMM_PMPI_MIN_BYTES']['value'] is None, other
    assert 'ARCOMM_PMPI' not in err, err

    # This machine: whatever it has, the document has the same shape.
    d, _ = run(arinfo, [])
    check_full(d, this_system=True)

    # A threshold set wins over the calibration, which then does not run.
    d, _ = run(arinfo, ['--only', 'config,paths'], {b'ARCOMM_NT_THRESHOLD': b'24M'})
    assert d['streaming_stores'] == {'threshold': '24M', 'threshold_bytes': 24 << 20,
                                     'source': 'set', 'origin': None,
                                     'calibration': None}, d['streaming_stores']

    # So does ARCOMM_CMA_THRESHOLD: set, no calibration; off, no CMA anywhere.
    d, _ = run(arinfo, ['--only', 'config,paths'], {b'ARCOMM_CMA_THRESHOLD': b'off'})
    assert d['single_copy'] == {'threshold': 'off', 'source': 'set', 'fast': None,
                                'fast_source': None, 'calibration': None}, d['single_copy']
    assert all(r['process_ranks_bulk'] == 'staged' for r in d['collective_paths'])
    # ARCOMM_CMA_FAST=1: the wider windows without a calibration.
    d, _ = run(arinfo, ['--only', 'config,paths'], {b'ARCOMM_CMA_FAST': b'1'})
    assert d['single_copy'] == {'threshold': 'auto', 'source': 'auto', 'fast': True,
                                'fast_source': 'set', 'calibration': None}, d['single_copy']
    rows = {(r['bytes'], r['collective']): r['process_ranks_bulk'] for r in d['collective_paths']}
    assert rows[(1 << 20, 'broadcast')] == 'cma' and rows[(256 << 20, 'alltoall')] == 'cma'
    assert rows[(16 << 20, 'reduce_scatter')] == 'staged', rows

    # --no-host and --only narrow the document; the header keys stay.
    d, _ = run(arinfo, ['--topology', xml, '--no-host'])
    assert 'host' not in d and 'config' in d
    d, _ = run(arinfo, ['--topology', xml, '--only', 'pci,paths', '--sizes', '1G', '-n', '4'])
    assert list(d) == ['schema', 'arcomm_version', 'build', 'nranks', 'pci_accelerators',
                       'paths', 'collective_paths', 'path_table', 'streaming_stores',
                       'single_copy', 'shared_heap'], list(d)
    assert d['nranks'] == 4 and [p['bytes'] for p in d['paths']] == [1 << 30]
    check_collective_paths(d)
    # The path table (comm_paths_query): ordered rows, the defaults' last one-pass for all.
    for kind in ('process_ranks', 'thread_ranks'):
        t = d['path_table'][kind]
        assert t and t[-1]['path'] == 'one-pass' and t[-1]['collectives'] == '*', t
        for r in t:
            assert set(r) == {'collectives', 'lo', 'hi', 'staged_bytes', 'min_ranks',
                              'max_ranks', 'ranks', 'path', 'tuned', 'item', 'why'}, r
            assert r['item'] == 0 and r['why'], r
    # --plan COLL SIZE: the plan alone, through the same rows; ARCOMM_PATHS's row first.
    d, _ = run(arinfo, ['--plan', 'allreduce', '1M', '-n', '4', '--only', 'paths'],
               {b'ARCOMM_PATHS': b'allreduce:1M:staged'})
    assert d['plan'] == {'collective': 'allreduce', 'bytes': 1 << 20, 'nranks': 4,
                         'thread_ranks': {'path': 'staged', 'row_path': 'staged', 'row': 0},
                         'process_ranks_private': {'path': 'staged', 'row_path': 'staged',
                                                   'row': 0},
                         'process_ranks_shared': {'path': 'staged', 'row_path': 'staged',
                                                  'row': 0}}, d['plan']
    assert d['path_table']['process_ranks'][0]['item'] == 1, d['path_table']
    d, _ = run(arinfo, ['--plan', 'reduce', '2M', '-n', '4', '--only', 'paths'])
    assert d['plan']['process_ranks_private'] == {'path': 'staged', 'row_path': 'one-pass',
                                                  'row': 1}, d['plan']
    assert d['plan']['process_ranks_shared']['path'] == 'one-pass', d['plan']

    # Around a flag threshold of 4K for 4 ranks (thread ranks too: it is set): broadcast,
    # reduce and allgather stage their size, reduce_scatter and alltoall 4 blocks of it.
    d, _ = run(arinfo, ['--topology', xml, '--only', 'paths', '-n', '4', '--sizes',
                        '1K,1025,4K,4097'], {b'ARCOMM_FLAG_THRESHOLD': b'4K'})
    check_collective_paths(d, 4096)
    got = {(r['bytes'], r['collective']): (r['path'], r['path_thread_ranks'])
           for r in d['collective_paths']}
    for size, single, blocks in ((1024, 'flag', 'flag'), (1025, 'flag', 'bulk'),
                                 (4096, 'flag', 'bulk'), (4097, 'bulk', 'bulk')):
        for c in COLLECTIVES:
            want = blocks if c in BLOCKS else single
            assert got[(size, c)] == (want, want), (size, c, got[(size, c)])
    print('arinfo --json: ok')
    return 0


if __name__ == '__main__':
    sys.exit(main())
