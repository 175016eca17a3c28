/* poas-info: lists the devices POAS sees (id, kind, name, memory, cores,
 * whether it shares the host's cores), as a table or, with --json, as one
 * JSON object for scripts. */
#include "poas.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
  fprintf(f,
          "Usage: poas-info [--devices LIST] [--json]\n"
          "List the devices POAS can use.\n\n"
          "  -d, --devices LIST  device selection, as POAS_DEVICES (e.g. cpu,opencl0)\n"
          "  -j, --json          print one JSON object instead of a table\n"
          "  -h, --help          show this help\n"
          "  -V, --version       show the version\n");
}

/* Writes s as a JSON string (quotes and escapes). */
static void json_string(const char *s) {
  putchar('"');
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      printf("\\%c", c);
    else if (c < 0x20)
      printf("\\u%04x", c);
    else
      putchar(c);
  }
  putchar('"');
}

static void print_json(poas_context *ctx) {
  int n = poas_device_count(ctx);
  printf("{\"version\": ");
  json_string(poas_version());
  printf(", \"devices\": [");
  for (int i = 0; i < n; i++) {
    poas_device_info d;
    poas_device_get(ctx, i, &d);
    printf("%s\n  {\"id\": ", i ? "," : "");
    json_string(d.id);
    printf(", \"kind\": ");
    json_string(poas_device_kind_name(d.kind));
    printf(", \"name\": ");
    json_string(d.name);
    printf(", \"driver\": ");
    json_string(d.driver);
    printf(", \"memory_bytes\": %llu, \"cores\": %d, \"shares_host_cores\": %s, "
           "\"host_memory\": %s, \"has_model\": %s}",
           (unsigned long long)d.memory_bytes, d.cores, d.shares_host_cores ? "true" : "false",
           d.host_memory ? "true" : "false", d.has_model ? "true" : "false");
  }
  printf("\n]}\n");
}

static void print_table(poas_context *ctx) {
  int n = poas_device_count(ctx);
  printf("%-10s %-7s %-44s %10s %6s %s\n", "id", "kind", "name", "memory", "cores",
         "shares host cores");
  for (int i = 0; i < n; i++) {
    poas_device_info d;
    poas_device_get(ctx, i, &d);
    printf("%-10s %-7s %-44.44s %7.1f GiB %6d %s\n", d.id, poas_device_kind_name(d.kind), d.name,
           (double)d.memory_bytes / (1 << 30), d.cores, d.shares_host_cores ? "yes" : "no");
  }
}

int main(int argc, char **argv) {
  static const struct option longopts[] = {{"devices", required_argument, NULL, 'd'},
                                           {"json", no_argument, NULL, 'j'},
                                           {"help", no_argument, NULL, 'h'},
                                           {"version", no_argument, NULL, 'V'},
                                           {NULL, 0, NULL, 0}};
  poas_options opts;
  poas_options_init(&opts);
  int json = 0, c;
  while ((c = getopt_long(argc, argv, "d:jhV", longopts, NULL)) != -1) {
    switch (c) {
    case 'd':
      opts.devices = optarg;
      break;
    case 'j':
      json = 1;
      break;
    case 'h':
      usage(stdout);
      return 0;
    case 'V':
      printf("poas-info (POAS) %s\n", poas_version());
      return 0;
    default:
      usage(stderr);
      return 2;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "poas-info: unexpected argument '%s'\n", argv[optind]);
    usage(stderr);
    return 2;
  }
  poas_context *ctx;
  int rc = poas_init(&ctx, &opts);
  if (rc) {
    fprintf(stderr, "poas-info: %s: %s\n", poas_strerror(rc), poas_error_detail());
    return 1;
  }
  if (json)
    print_json(ctx);
  else
    print_table(ctx);
  poas_finalize(ctx);
  return 0;
}
