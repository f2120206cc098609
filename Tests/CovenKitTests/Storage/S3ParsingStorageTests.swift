@testable import CovenKit
import XCTest

/// The pieces of the S3 client that need no server: XML answers, Retry-After, key decoding,
/// error classification, URL parsing of locations.
final class S3ParsingStorageTests: XCTestCase {
    func testListingFromSeaweedFSWithEntitiesAndPlusEncoding() {
        let body = """
            <?xml version="1.0" encoding="UTF-8"?>
            <ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>probe</Name><Prefix></Prefix>\
            <MaxKeys>10</MaxKeys><IsTruncated>true</IsTruncated><Contents><Key>a+b%2Bc</Key>\
            <ETag>&#34;5d41402abc4b2a76b9719d911017c592&#34;</ETag><Size>5</Size></Contents>\
            <Contents><Key>empty</Key><Size>0</Size></Contents><EncodingType>url</EncodingType>\
            <KeyCount>2</KeyCount><NextContinuationToken>tok&amp;en</NextContinuationToken></ListBucketResult>
            """
        let xml = S3XML(Array(body.utf8))
        XCTAssertEqual(xml.rootName, "ListBucketResult")
        XCTAssertEqual(xml.text("IsTruncated"), "true")
        XCTAssertEqual(xml.text("NextContinuationToken"), "tok&en")
        XCTAssertEqual(xml.text("Prefix"), "")
        let contents = xml.blocks("Contents")
        XCTAssertEqual(contents.count, 2)
        XCTAssertEqual(contents[0].text("Key").map(S3Storage.urlDecode), "a b+c")
        XCTAssertEqual(contents[0].text("ETag"), "\"5d41402abc4b2a76b9719d911017c592\"")
        XCTAssertEqual(contents[1].text("Size"), "0")
        // <Key> must not match <KeyCount>.
        XCTAssertEqual(xml.text("KeyCount"), "2")
    }

    func testMotoEncodesSpaceAsPercent20() {
        XCTAssertEqual(S3Storage.urlDecode("a%20b%2Bc/%C3%A9"), "a b+c/é")
    }

    func testErrorBodyGivesCodeMessageAndFailure() {
        let body = """
            <?xml version="1.0" encoding="UTF-8"?>
            <Error><Code>SignatureDoesNotMatch</Code><Message>The request signature we calculated does not match</Message></Error>
            """
        let response = HTTPResponse(status: 403, headers: [:], body: Array(body.utf8))
        let error = HTTPClient.statusError(response, operation: "get 'x'")
        XCTAssertEqual(error.code, .storage)
        XCTAssertEqual(error.storageFailure, .denied)
        XCTAssertEqual(error.details["status"], "403")
        XCTAssertEqual(error.details["provider_code"], "SignatureDoesNotMatch")
        XCTAssertEqual(error.cause, "HTTP 403 SignatureDoesNotMatch: The request signature we calculated does not match")
    }

    func testFailureClasses() {
        func failure(_ status: Int, _ code: String? = nil, retryAfter: String? = nil) -> CovenError {
            let body = code.map { "<Error><Code>\($0)</Code><Message>m</Message></Error>" } ?? ""
            var headers: [String: String] = [:]
            if let retryAfter { headers["retry-after"] = retryAfter }
            return HTTPClient.statusError(HTTPResponse(status: status, headers: headers, body: Array(body.utf8)), operation: "x")
        }
        XCTAssertEqual(failure(503, "SlowDown", retryAfter: "7").storageFailure, .throttled)
        XCTAssertEqual(failure(503, "SlowDown", retryAfter: "7").retryAfter, 7)
        XCTAssertEqual(failure(429).storageFailure, .throttled)
        XCTAssertEqual(failure(401).storageFailure, .denied)
        XCTAssertEqual(failure(400, "EntityTooLarge").storageFailure, .full)
        XCTAssertEqual(failure(400, "EntityTooLarge").code, .storageFull)
        XCTAssertEqual(failure(507).storageFailure, .full)
        XCTAssertEqual(failure(500, "InternalError").storageFailure, .provider)
        XCTAssertEqual(failure(504).storageFailure, .network)
        XCTAssertEqual(failure(400, "InvalidPart").storageFailure, .provider)
    }

    func testRetryAfterSecondsAndHTTPDate() {
        XCTAssertEqual(HTTPClient.retryAfter("3"), 3)
        XCTAssertEqual(HTTPClient.retryAfter(" 0 "), 0)
        XCTAssertNil(HTTPClient.retryAfter("soon"))
        XCTAssertNil(HTTPClient.retryAfter(nil))
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        let inTen = formatter.string(from: Date().addingTimeInterval(10))
        let wait = HTTPClient.retryAfter(inTen) ?? -1
        XCTAssertGreaterThan(wait, 8)
        XCTAssertLessThanOrEqual(wait, 10)
        XCTAssertEqual(HTTPClient.retryAfter("Wed, 21 Oct 2015 07:28:00 GMT"), 0)
    }

    func testMissingCredentialsAreDeniedWithAHint() {
        let location = StorageLocation.s3(bucket: "bucket", prefix: "", endpoint: "http://127.0.0.1:1", region: nil, pathStyle: nil)
        XCTAssertThrowsError(try S3Storage(location: location, environment: ["AWS_ACCESS_KEY_ID": "k"])) { error in
            let error = error.asCovenError
            XCTAssertEqual(error.code, .storage)
            XCTAssertEqual(error.storageFailure, .denied)
            XCTAssertNotNil(error.hint)
        }
    }

    func testEndpointRegionAndAddressing() throws {
        let env = ["AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "AWS_DEFAULT_REGION": "eu-west-3"]
        let aws = try S3Storage(location: StorageLocation(parsing: "s3://my-bucket/store"), environment: env)
        XCTAssertEqual(aws.region, "eu-west-3")
        XCTAssertFalse(aws.pathStyle)
        var withEndpoint = env
        withEndpoint["AWS_ENDPOINT_URL"] = "http://127.0.0.1:9000"
        withEndpoint["AWS_REGION"] = "us-west-2"
        let local = try S3Storage(location: StorageLocation(parsing: "s3://my-bucket"), environment: withEndpoint)
        XCTAssertTrue(local.pathStyle)
        XCTAssertEqual(local.region, "us-west-2")
        let dotted = try S3Storage(location: StorageLocation(parsing: "s3://my.bucket?region=ap-south-1"), environment: env)
        XCTAssertTrue(dotted.pathStyle)
        XCTAssertEqual(dotted.region, "ap-south-1")
        XCTAssertThrowsError(try S3Storage(location: StorageLocation(parsing: "s3://my-bucket?endpoint=ftp://x"), environment: env))
    }

    func testUnreachableEndpointIsANetworkFailureNeverAbsence() throws {
        var options = StorageOptions(environment: [:])
        options.requestRetries = 1
        options.connectTimeout = 2
        let env = ["AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"]
        // Port 1 on loopback: connection refused at once.
        let storage = try S3Storage(
            location: StorageLocation(parsing: "s3://bucket?endpoint=http://127.0.0.1:1"), options: options, environment: env)
        XCTAssertThrowsError(try storage.head("files/x")) { error in
            let error = error.asCovenError
            XCTAssertEqual(error.storageFailure, .network)
            XCTAssertEqual(error.details["curl_code"], "7")
            XCTAssertTrue(error.message.contains("after 2 attempts"), error.message)
        }
    }
}
