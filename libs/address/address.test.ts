import {
  canonicalAddress,
  clientKey,
  formatCidrList,
  isLoopbackName,
  ProxyTrust,
  parseCidrList,
  parseIp,
} from '.';

describe('addresses', () => {
  test('IPv4, IPv6 and v4-mapped IPv6 parse to one canonical text', () => {
    expect(canonicalAddress('127.0.0.1')).toBe('127.0.0.1');
    expect(canonicalAddress('::ffff:127.0.0.1')).toBe('127.0.0.1');
    expect(canonicalAddress('0000:0000:0000:0000:0000:ffff:7f00:0001')).toBe('127.0.0.1');
    expect(canonicalAddress('2001:DB8:0:0:0:0:0:1')).toBe('2001:db8::1');
    expect(canonicalAddress('[2001:db8::1]')).toBe('2001:db8::1');
    expect(canonicalAddress('::1')).toBe('::1');
    expect(canonicalAddress('::')).toBe('::');
    expect(canonicalAddress('fe80:0:0:1::')).toBe('fe80:0:0:1::');
    for (const bad of [
      '',
      '1.2.3',
      '1.2.3.4.5',
      '256.1.1.1',
      '01.2.3.4',
      '1:2:3:4:5:6:7:8:9',
      ':::',
      'a::b::c',
      'x',
      '1.2.3.4/8',
    ])
      expect(parseIp(bad)).toBeUndefined();
  });

  test('CIDR lists: IPv4 and IPv6 prefixes, bare addresses, canonical form, errors name the entry', () => {
    const parsed = parseCidrList('10.0.0.0/8, 127.0.0.1 ,2001:db8::/32,::1');
    expect(parsed.ok).toBe(true);
    if (!parsed.ok) return;
    expect(formatCidrList(parsed.cidrs)).toBe('10.0.0.0/8,127.0.0.1/32,2001:db8::/32,::1/128');
    // v4-mapped prefixes written in IPv6 come back as the IPv4 prefixes they are, and re-parse the same.
    const mapped = parseCidrList('::ffff:10.0.0.1,::ffff:10.0.0.0/104');
    expect(mapped.ok && formatCidrList(mapped.cidrs)).toBe('10.0.0.1/32,10.0.0.0/8');
    for (const [text, entry] of [
      ['10.0.0.0/33', '10.0.0.0/33'],
      ['2001:db8::/129', '2001:db8::/129'],
      ['10.0.0.1/8', '10.0.0.1/8'],
      ['nope', 'nope'],
      ['10.0.0.0/8,,', ''],
      ['1.2.3.4/-1', '1.2.3.4/-1'],
    ] as const) {
      const result = parseCidrList(text);
      expect(result.ok).toBe(false);
      if (!result.ok) expect(result.entry).toBe(entry);
    }
  });

  test('matching: prefixes of any length, IPv4 against v4-mapped peers, never across families', () => {
    const trust = ProxyTrust.fromText('10.0.0.0/8,192.168.1.128/25,2001:db8::/32');
    expect(trust.trusts('10.255.1.2')).toBe(true);
    expect(trust.trusts('::ffff:10.1.1.1')).toBe(true);
    expect(trust.trusts('11.0.0.1')).toBe(false);
    expect(trust.trusts('192.168.1.200')).toBe(true);
    expect(trust.trusts('192.168.1.127')).toBe(false);
    expect(trust.trusts('2001:db8:ffff::1')).toBe(true);
    expect(trust.trusts('2001:db9::1')).toBe(false);
    expect(trust.trusts('garbage')).toBe(false);
    expect(ProxyTrust.fromText('0.0.0.0/0').trusts('::1')).toBe(false);
    expect(ProxyTrust.fromText('::/0').trusts('::1')).toBe(true);
  });
});

describe('the client address behind trusted proxies', () => {
  const trust = ProxyTrust.fromText('127.0.0.1/32,10.0.0.0/8,2001:db8::/32');

  test('the rightmost hop that is not a trusted proxy, walking from the right', () => {
    expect(trust.clientAddress('127.0.0.1', '198.51.100.7')).toBe('198.51.100.7');
    expect(trust.clientAddress('127.0.0.1', '198.51.100.7, 10.0.0.9')).toBe('198.51.100.7');
    expect(trust.clientAddress('127.0.0.1', '203.0.113.1,198.51.100.7,10.0.0.9, 10.1.1.1')).toBe(
      '198.51.100.7',
    );
    expect(trust.clientAddress('::ffff:127.0.0.1', '2001:db8::5, 2001:db9::7 , 2001:db8::1')).toBe(
      '2001:db9::7',
    );
  });

  test('a client-set first hop cannot choose the key (the ALB / nginx $proxy_add_x_forwarded_for bypass)', () => {
    for (const spoof of ['1.1.1.1', '10.0.0.1', 'garbage', '::1', ''])
      expect(trust.clientAddress('127.0.0.1', `${spoof}, 198.51.100.7`)).toBe('198.51.100.7');
  });

  test('an untrusted peer is the client whatever it sends; no header means the peer', () => {
    expect(trust.clientAddress('198.51.100.9', '1.2.3.4')).toBe('198.51.100.9');
    expect(trust.clientAddress('127.0.0.1', '')).toBe('127.0.0.1');
    expect(trust.clientAddress('0000:0000:0000:0000:0000:ffff:7f00:0001', '')).toBe('127.0.0.1');
  });

  test('every hop trusted: the leftmost; an unparsable hop right of the proxies is the client itself', () => {
    expect(trust.clientAddress('127.0.0.1', '10.0.0.1, 10.0.0.2')).toBe('10.0.0.1');
    expect(trust.clientAddress('127.0.0.1', '1.1.1.1, not-an-ip, 10.0.0.2')).toBe('not-an-ip');
    expect(trust.clientAddress('127.0.0.1', ' , ,')).toBe('127.0.0.1');
  });

  test('a hop is cut to a bounded key; a huge header is walked only from its right end', () => {
    const long = 'x'.repeat(10_000);
    expect(trust.clientAddress('127.0.0.1', `1.1.1.1, ${long}`).length).toBeLessThanOrEqual(64);
    const many = `${Array.from({ length: 5000 }, (_, i) => `10.0.${i >> 8}.${i & 255}`).join(',')},198.51.100.1`;
    expect(trust.clientAddress('127.0.0.1', many)).toBe('198.51.100.1');
  });

  test('legacy trustForwardedFor (no list): the peer is the one proxy, its rightmost hop the client', () => {
    const legacy = ProxyTrust.anyPeer();
    expect(legacy.clientAddress('192.0.2.1', '1.1.1.1, 198.51.100.7')).toBe('198.51.100.7');
    expect(legacy.clientAddress('192.0.2.1', '')).toBe('192.0.2.1');
    expect(ProxyTrust.none().clientAddress('192.0.2.1', '198.51.100.7')).toBe('192.0.2.1');
  });
});

describe('the key a client is limited under', () => {
  test('IPv4 as it is; IPv6 by its /64, so rotating the host part buys nothing', () => {
    expect(clientKey('198.51.100.7')).toBe('198.51.100.7');
    expect(clientKey('2001:db8:1:2:aaaa::1')).toBe('2001:db8:1:2::/64');
    expect(clientKey('2001:db8:1:2:ffff:ffff:ffff:ffff')).toBe('2001:db8:1:2::/64');
    expect(clientKey('2001:db8:1:3::1')).toBe('2001:db8:1:3::/64');
    expect(clientKey('::1')).toBe('::/64');
    expect(clientKey('not-an-ip')).toBe('not-an-ip');
  });
});

describe('isLoopbackName', () => {
  test.each([
    ['127.0.0.1', true],
    ['127.1.2.3', true],
    ['localhost', true],
    ['LOCALHOST', true],
    ['::1', true],
    ['[::1]', true],
    ['::ffff:127.0.0.1', true],
    ['0.0.0.0', false],
    ['::', false],
    ['10.0.0.1', false],
    ['::2', false],
    ['localhost.example', false],
    ['admin.example', false],
  ])('%s: %s', (host, loopback) => {
    expect(isLoopbackName(host)).toBe(loopback);
  });
});
