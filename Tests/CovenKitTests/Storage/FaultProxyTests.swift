import CovenTestSupport
import Foundation
import XCTest

/// The fault proxy the storage tests stand behind (scripts/faultproxy.py): a rule of `count`
/// N faults N requests, however many arrive at once.
final class FaultProxyTests: XCTestCase {
    /// The status of one `GET path` sent on a connection of its own to 127.0.0.1:`port`, or 0
    /// when no status line came back.
    private static func status(port: UInt16, path: String) -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return 0 }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else { return 0 }
        let request = Array("GET \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nConnection: close\r\n\r\n".utf8)
        guard request.withUnsafeBytes({ send(fd, $0.baseAddress, $0.count, 0) }) == request.count else { return 0 }
        var answer: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 512)
        while !answer.contains(UInt8(ascii: "\n")) {
            let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            guard count > 0 else { break }
            answer.append(contentsOf: buffer[0..<count])
        }
        let line = String(decoding: answer.prefix { $0 != UInt8(ascii: "\r") }, as: UTF8.self)
        let parts = line.split(separator: " ")
        return parts.count >= 2 ? Int(parts[1]) ?? 0 : 0
    }

    /// fetch-kept's several-files test stalls "the first GET" while five others run. Two faults
    /// of the proxy held a second file back: requests arriving together each re-read new rules
    /// and reset their count, so two or three of them were faulted (about one round in five
    /// here); and its listen queue of 5 dropped the connections past it, whose clients tried
    /// again 1 s later (then 3 s, 7 s): every round of 16 took over a second.
    func testACountedRuleFaultsOnlyThatManyRequestsArrivingAtOnceAndNoneWaitsToConnect() throws {
        let started = Date()
        let proxy = try FaultProxy(upstream: "http://127.0.0.1:1")
        defer { proxy.stop() }
        guard let port = UInt16(proxy.endpoint.split(separator: ":").last ?? "") else { return XCTFail("no port in \(proxy.endpoint)") }
        for round in 0..<25 {
            // New content each round: the proxy takes it as new rules with a fresh count.
            // The first matching request gets a 500, the others a 404: none goes upstream.
            try proxy.inject(#"""
                {"rules": [{"mode": "status", "status": 500, "method": "GET", "path": "/files/", "count": 1},
                           {"mode": "status", "status": 404, "count": -1}], "round": \#(round)}
                """#)
            let statuses = Statuses()
            let finished = DispatchGroup()
            for index in 0..<16 {
                finished.enter()
                Thread.detachNewThread {
                    statuses.add(Self.status(port: port, path: "/bucket/store/files/\(round)-\(index)"))
                    finished.leave()
                }
            }
            finished.wait()
            XCTAssertEqual(statuses.all.sorted(), [Int](repeating: 404, count: 15) + [500], "round \(round)")
        }
        // 25 rounds of 16 local requests: well under a second each, unless a connection waited
        // for its client's next try (1 s at the least).
        XCTAssertLessThan(Date().timeIntervalSince(started), 10)
    }

    /// Statuses set by several threads. @unchecked: used under `lock`.
    private final class Statuses: @unchecked Sendable {
        private let lock = NSLock()
        private var values: [Int] = []
        func add(_ value: Int) { lock.lock(); values.append(value); lock.unlock() }
        var all: [Int] { lock.lock(); defer { lock.unlock() }; return values }
    }
}
