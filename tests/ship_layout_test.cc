// ship/layout.cc and the selection parameters of ship/bucket.cc: keys, URLs, listings.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "ship/bucket.h"
#include "ship/client.h"

namespace d9::ship {
namespace {

TEST(ShipLayout, KeyIsDial9sLayoutFromTheStartInUtc) {
  SegmentInfo info{"api/v2", "host.example", "abcd-42", 7, 1795522684};  // 2026-11-24 12:18:04Z
  EXPECT_EQ(segment_key("fleet/prod", info),
            "fleet/prod/2026-11-24/1218/api_v2/host.example/abcd-42/1795522684-7.bin.gz");
  EXPECT_EQ(segment_key("", info),
            "2026-11-24/1218/api_v2/host.example/abcd-42/1795522684-7.bin.gz");
  SegmentInfo back;
  ASSERT_TRUE(parse_segment_key("fleet/prod", segment_key("fleet/prod", info), &back));
  EXPECT_EQ(back.service, "api_v2");
  EXPECT_EQ(back.host, "host.example");
  EXPECT_EQ(back.boot_id, "abcd-42");
  EXPECT_EQ(back.index, 7u);
  EXPECT_EQ(back.start_secs, 1795522684u);
  // Not segment keys: another prefix, too few levels, another extension.
  EXPECT_FALSE(parse_segment_key("other", segment_key("fleet/prod", info), &back));
  EXPECT_FALSE(parse_segment_key("", "2026-11-24/1218/svc/host/1-0.bin.gz", &back));
  EXPECT_FALSE(parse_segment_key("", "2026-11-24/1218/s/h/b/1-0.bin.zst", &back));
  EXPECT_EQ(path_segment(""), "unknown");
}

TEST(ShipLayout, S3Urls) {
  Location l;
  ASSERT_TRUE(parse_s3_url("s3://bucket/a/b/", &l));
  EXPECT_EQ(l.bucket, "bucket");
  EXPECT_EQ(l.prefix, "a/b");
  ASSERT_TRUE(parse_s3_url("s3://bucket", &l));
  EXPECT_EQ(l.prefix, "");
  EXPECT_FALSE(parse_s3_url("s3:///x", &l));
  EXPECT_FALSE(parse_s3_url("/tmp/x", &l));
  Selection s;
  std::string error;
  ASSERT_TRUE(parse_selection_url(
      "s3://b/p?host=h%2D1&from=2026-11-24T12:00:00Z&to=@1795523000&sample=3", {}, &l, &s, &error))
      << error;
  EXPECT_EQ(l.prefix, "p");
  EXPECT_EQ(s.host, "h-1");
  EXPECT_EQ(*s.from_secs, 1795521600);
  EXPECT_EQ(*s.to_secs, 1795523000);
  EXPECT_EQ(s.sample, 3u);
  EXPECT_FALSE(parse_selection_url("s3://b/p?colour=red", {}, &l, &s, &error));
  EXPECT_NE(error.find("colour=red"), std::string::npos);
}

TEST(ShipLayout, ListObjectsV2Answer) {
  std::ifstream in(std::string(D9_FIXTURES_DIR) + "/s3/list-page.xml");
  std::stringstream xml;
  xml << in.rdbuf();
  Listing l;
  std::string error;
  ASSERT_TRUE(parse_list_xml(xml.str(), &l, &error)) << error;
  ASSERT_EQ(l.objects.size(), 1u);
  EXPECT_EQ(l.objects[0].key, "fleet/2026-11-24/1218/api&svc/host-a/abcd-42/1795522684-0.bin.gz");
  EXPECT_EQ(l.objects[0].etag, "22defc797b6532b273bf9c72874229b3");
  EXPECT_EQ(l.objects[0].size, 37993u);
  EXPECT_EQ(l.prefixes, std::vector<std::string>{"fleet/2026-11-24/"});
  EXPECT_TRUE(l.truncated);
  EXPECT_EQ(l.next_token, "tok/1");
  EXPECT_FALSE(parse_list_xml("<Error><Code>NoSuchBucket</Code></Error>", &l, &error));
  EXPECT_FALSE(parse_list_xml("<ListBucketResult><Contents><Key>k</Key></Contents>", &l, &error));
  EXPECT_FALSE(parse_list_xml(
      "<ListBucketResult><Contents><Key>a&bogus;</Key><Size>1</Size></Contents></ListBucketResult>",
      &l, &error));
}

}  // namespace
}  // namespace d9::ship
