@testable import CovenKit
import XCTest

/// Known-answer tests of coven's AWS Signature Version 4.
///
/// The `suite` vectors come from AWS's published "Signature Version 4 Test Suite"
/// (aws-sig-v4-test-suite, formerly at docs.aws.amazon.com/general/latest/gr/signature-v4-test-suite.html,
/// kept in github.com/awslabs/aws-c-auth under tests/aws-signing-test-suite/v4/<name>/): credentials
/// AKIDEXAMPLE / wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY, 20150830T123600Z, us-east-1, service
/// `service`. The last vector is the S3 API reference's "Example: GET Object" (sig-v4-header-based-auth,
/// examplebucket, AKIAIOSFODNN7EXAMPLE), whose signature the S3 documentation publishes.
final class SigV4StorageTests: XCTestCase {
    private let suite = SigV4Signer(
        credentials: SigV4Credentials(accessKeyID: "AKIDEXAMPLE", secretAccessKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"),
        region: "us-east-1", service: "service")
    private let date = "20150830T123600Z"
    private let host = ("Host", "example.amazonaws.com")
    private var empty: String { SigV4Signer.emptyPayloadHash }

    private func signSuite(
        _ method: String = "GET", path: String, query: [(String, String)] = [], extra: [(String, String)] = [],
        payload: String? = nil, signer: SigV4Signer? = nil
    ) throws -> SigV4Signer.Signature {
        try (signer ?? suite).sign(
            method: method, path: path, query: query, headers: [host, ("X-Amz-Date", date)] + extra,
            payloadHash: payload ?? empty, amzDate: date)
    }

    private func authorization(_ signedHeaders: String, _ signature: String) -> String {
        "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
            + "SignedHeaders=\(signedHeaders), Signature=\(signature)"
    }

    // suite: get-vanilla
    func testGetVanilla() throws {
        let signed = try signSuite(path: "/")
        XCTAssertEqual(signed.canonicalRequest, """
            GET
            /

            host:example.amazonaws.com
            x-amz-date:20150830T123600Z

            host;x-amz-date
            e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
            """)
        XCTAssertEqual(signed.stringToSign, """
            AWS4-HMAC-SHA256
            20150830T123600Z
            20150830/us-east-1/service/aws4_request
            bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63
            """)
        XCTAssertEqual(signed.authorization, authorization("host;x-amz-date", "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"))
    }

    // suite: get-vanilla-query-order-key-case (GET /?Param2=value2&Param1=value1)
    func testGetVanillaQueryOrderKeyCase() throws {
        let signed = try signSuite(path: "/", query: [("Param2", "value2"), ("Param1", "value1")])
        XCTAssertEqual(signed.canonicalRequest.split(separator: "\n", omittingEmptySubsequences: false)[2], "Param1=value1&Param2=value2")
        XCTAssertTrue(signed.stringToSign.hasSuffix("816cd5b414d056048ba4f7c5386d6e0533120fb1fcfa93762cf0fc39e2cf19e0"))
        XCTAssertEqual(signed.signature, "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500")
    }

    // suite: get-utf8 (GET /ሴ)
    func testGetUTF8() throws {
        let signed = try signSuite(path: "/ሴ")
        XCTAssertEqual(signed.canonicalRequest.split(separator: "\n")[1], "/%E1%88%B4")
        XCTAssertTrue(signed.stringToSign.hasSuffix("2a0a97d02205e45ce2e994789806b19270cfbbb0921b278ccf58f5249ac42102"))
        XCTAssertEqual(signed.signature, "8318018e0b0f223aa2bbf98705b62bb787dc9c0e678f255a891fd03141be5d85")
    }

    // suite: get-space (GET /example space/, S3's unnormalized form)
    func testGetSpace() throws {
        let signed = try signSuite(path: "/example space/")
        XCTAssertEqual(signed.canonicalRequest.split(separator: "\n")[1], "/example%20space/")
        XCTAssertEqual(signed.signature, "652487583200325589f1fba4c7e578f72c47cb61beeca81406b39ddec1366741")
    }

    // suite: get-unreserved
    func testGetUnreserved() throws {
        let path = "/-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
        let signed = try signSuite(path: path)
        XCTAssertEqual(signed.canonicalRequest.split(separator: "\n")[1], Substring(path))
        XCTAssertEqual(signed.signature, "07ef7494c76fa4850883e2b006601f940f8a34d404d0cfa977f52a65bbf5f24f")
    }

    // suite: get-vanilla-utf8-query (GET /?ሴ=bar)
    func testGetVanillaUTF8Query() throws {
        let signed = try signSuite(path: "/", query: [("ሴ", "bar")])
        XCTAssertEqual(signed.canonicalRequest.split(separator: "\n")[2], "%E1%88%B4=bar")
        XCTAssertEqual(signed.signature, "2cdec8eed098649ff3a119c94853b13c643bcf08f8b0a1d91e12c9027818dd04")
    }

    // suite: post-x-www-form-urlencoded (body Param1=value1, content-type signed)
    func testPostFormURLEncoded() throws {
        let payload = SHA256.digest(Array("Param1=value1".utf8)).hex
        XCTAssertEqual(payload, "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e")
        let signed = try signSuite("POST", path: "/", extra: [("Content-Type", "application/x-www-form-urlencoded")], payload: payload)
        XCTAssertEqual(signed.canonicalRequest, """
            POST
            /

            content-type:application/x-www-form-urlencoded
            host:example.amazonaws.com
            x-amz-date:20150830T123600Z

            content-type;host;x-amz-date
            9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e
            """)
        XCTAssertTrue(signed.stringToSign.hasSuffix("42a5e5bb34198acb3e84da4f085bb7927f2bc277ca766e6d19c73c2154021281"))
        XCTAssertEqual(
            signed.authorization,
            authorization("content-type;host;x-amz-date", "ff11897932ad3f4e8b18135d722051e5ac45fc38421b1da7b9d196a0fe09473a"))
    }

    // suite: get-vanilla-with-session-token (x-amz-security-token signed)
    func testGetVanillaWithSessionToken() throws {
        let token = "6e86291e8372ff2a2260956d9b8aae1d763fbf315fa00fa31553b73ebf194267"
        let signed = try signSuite(path: "/", extra: [("X-Amz-Security-Token", token)])
        XCTAssertEqual(signed.signedHeaders, "host;x-amz-date;x-amz-security-token")
        XCTAssertEqual(signed.signature, "07ec1639c89043aa0e3e2de82b96708f198cceab042d4a97044c66dd9f74e7f8")
    }

    // S3 API reference, "Signature Calculations for the Authorization Header", Example: GET Object
    // (GET /test.txt with Range: bytes=0-9 from examplebucket, 20130524T000000Z).
    func testS3DocumentationGetObjectExample() throws {
        let signer = SigV4Signer(
            credentials: SigV4Credentials(accessKeyID: "AKIAIOSFODNN7EXAMPLE", secretAccessKey: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
            region: "us-east-1", service: "s3")
        let signed = try signer.sign(
            method: "GET", path: "/test.txt", query: [],
            headers: [
                ("Host", "examplebucket.s3.amazonaws.com"), ("Range", "bytes=0-9"),
                ("x-amz-content-sha256", SigV4Signer.emptyPayloadHash), ("x-amz-date", "20130524T000000Z"),
            ],
            payloadHash: SigV4Signer.emptyPayloadHash, amzDate: "20130524T000000Z")
        XCTAssertEqual(signed.canonicalRequest, """
            GET
            /test.txt

            host:examplebucket.s3.amazonaws.com
            range:bytes=0-9
            x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
            x-amz-date:20130524T000000Z

            host;range;x-amz-content-sha256;x-amz-date
            e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
            """)
        XCTAssertTrue(signed.stringToSign.hasSuffix("7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972"))
        XCTAssertEqual(signed.signature, "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41")
        XCTAssertEqual(
            signed.authorization,
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
                + "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41")
    }

    // MARK: - Encoding rules

    func testPathEncodingKeepsOnlyUnreservedAndSlash() {
        XCTAssertEqual(SigV4Signer.encodePath("/b/dir/a b+c%d~e_f.g-h/é"), "/b/dir/a%20b%2Bc%25d~e_f.g-h/%C3%A9")
        XCTAssertEqual(SigV4Signer.encodePath("/b/x//y/./z"), "/b/x//y/./z")
        XCTAssertEqual(SigV4Signer.encodePath(""), "/")
    }

    func testQueryEncodingSortsByEncodedNameThenValue() {
        XCTAssertEqual(
            SigV4Signer.canonicalQuery([("prefix", "logs/a b"), ("list-type", "2"), ("uploads", ""), ("a", "2"), ("a", "1")]),
            "a=1&a=2&list-type=2&prefix=logs%2Fa%20b&uploads=")
    }

    func testHeaderValuesAreTrimmedAndCollapsed() {
        XCTAssertEqual(SigV4Signer.trimHeaderValue("  value1   value2  "), "value1 value2")
    }

    func testAmzDateIsUTC() {
        XCTAssertEqual(SigV4Signer.amzDate(Date(timeIntervalSince1970: 1_440_938_160)), "20150830T123600Z")
    }

    func testHMACKnownAnswer() throws {
        // RFC 4231, test case 2.
        let mac = try HMACSHA256.authenticate("what do ya want for nothing?", key: Array("Jefe".utf8))
        XCTAssertEqual(mac.hex, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
    }
}
